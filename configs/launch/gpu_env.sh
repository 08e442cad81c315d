# gpu_env.sh — sourced by the GPU launch scripts: the environment a multi-node NCCL job usually needs. Every value
# here is a default: anything already set in the environment wins. Adjust to the cluster (its admins' NCCL page).
#   NCCL_DEBUG=WARN               NCCL's own one-line errors; INFO when diagnosing topology or transport choices
#   NCCL_SOCKET_IFNAME            the interface for NCCL's bootstrap and socket transport; '^lo,docker' excludes
#                                 loopback and container bridges (set e.g. ib0 or eth0 on clusters that need it)
#   NCCL_IB_HCA                   which InfiniBand/RoCE adapters NCCL uses (unset: all it finds; e.g. mlx5)
#   NCCL_IB_DISABLE=0             keep InfiniBand/RoCE on (1 forces sockets: a diagnosis step, much slower)
#   NCCL_NVLS_ENABLE              NVLink SHARP on NVSwitch systems (NCCL's default: on where supported)
#   UCX_TLS, OMPI_MCA_pml         Open MPI's own traffic (ringlm's control messages, checkpoint I/O coordination,
#                                 the staged transport): UCX where the cluster's Open MPI is built with it
#   CUDA_DEVICE_ORDER=PCI_BUS_ID  local rank i uses device i in bus order (ringlm picks device local_rank % count)
#   HDF5_USE_FILE_LOCKING=FALSE   shared file systems (ringlm turns locking off for its files anyway)
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}
export NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-0}
[ -n "${NCCL_IB_HCA:-}" ] && export NCCL_IB_HCA
export CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}   # host-side work per rank (data loading, checkpoint I/O)
# the names to forward with mpirun -x (Slurm's srun forwards the whole environment)
GPU_ENV_NAMES=(NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_DISABLE CUDA_DEVICE_ORDER HDF5_USE_FILE_LOCKING OMP_NUM_THREADS)
for v in NCCL_IB_HCA NCCL_NVLS_ENABLE UCX_TLS UCX_NET_DEVICES OMPI_MCA_pml OMPI_MCA_btl; do
  [ -n "${!v:-}" ] && GPU_ENV_NAMES+=("$v")
done
true
