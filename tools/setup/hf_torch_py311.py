"""hf_torch_py311 — makes Debian 12's PyTorch 1.13 importable in full under Python 3.11; tools/setup/hf_env.sh installs
it into the virtual environment build/hfenv (as ringlm_torch_py311.py, imported by ringlm_torch_py311.pth at
start-up).

PyTorch 1.13's torch/distributed/_shard/sharded_tensor/metadata.py declares a dataclass field with an instance as
its default, `tensor_properties: TensorProperties = field(default=TensorProperties())`. Python 3.11 refuses
defaults that are not hashable (a dataclass with eq=True is not), so importing that module — and with it
torch.distributed.fsdp, which transformers' model.generate() imports (transformers.integrations.fsdp) — raises
"ValueError: mutable default <class '...TensorProperties'> for field tensor_properties is not allowed: use
default_factory". PyTorch 2.0 fixed it by writing `field(default_factory=TensorProperties)`.

This module installs an import hook for that one module only: when Python imports
torch.distributed._shard.sharded_tensor.metadata from source that contains the 1.13 line, the line is compiled
as PyTorch 2.0 writes it (the rest of the file unchanged; no file on disk is modified). Source without that line
(any other PyTorch) and every other module are imported as usual; before Python 3.11 nothing is installed.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import sys

TARGET = "torch.distributed._shard.sharded_tensor.metadata"
OLD = "field(default=TensorProperties())"
NEW = "field(default_factory=TensorProperties)"


class _Loader(importlib.machinery.SourceFileLoader):
    """The module's own source, with OLD compiled as NEW; bytecode is neither read from nor written to the cache
    (the cached .pyc is the unchanged file's)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        src = importlib.util.decode_source(self.get_data(path))
        return compile(src.replace(OLD, NEW), path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return None
        try:
            with open(spec.origin, "rb") as f:
                if OLD.encode() not in f.read():
                    return None                      # a PyTorch that does not need this
        except OSError:
            return None
        spec.loader = _Loader(fullname, spec.origin)
        return spec


def install():
    if sys.version_info >= (3, 11) and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
