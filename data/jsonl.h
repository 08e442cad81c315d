// jsonl.h — JSON Lines input for build/prepare: one JSON object per line, one document per record (the text of a
// named string field), gzip-compressed or plain, read in a stream (a line at a time, whatever the file's size).
//
// A record is a line holding one JSON object (RFC 8259; surrounding whitespace allowed); lines of whitespace only are
// no records and are passed over. The document is the value of the object's top-level field `field`: a string, its
// text as UTF-8 bytes (escapes decoded; a \u escape of a lone UTF-16 surrogate becomes U+FFFD and is counted); null
// or "" is an empty record (skipped by the caller). Errors (1 + one line in err naming FILE:LINE): a line that is not
// valid JSON or not an object, bytes that are not UTF-8, the field missing (the message lists the record's fields) or
// given twice, or not a string or null; a file that cannot be read or decompressed (a corrupt or truncated gzip).
// The gzip format is recognised by its magic bytes, not by the name.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct JsonlReader JsonlReader;

// Open PATH for reading records of FIELD. 0 with *r, or 1 with err.
int jsonl_open(JsonlReader** r, const char* path, const char* field, char* err, size_t errlen);
// The next record: 1 with its text in *text (*len bytes, valid until the next call; *len 0 for null or "") and its
// line number (1-based) in *line; 0 at the end of the file; -1 with err.
int jsonl_next(JsonlReader* r, const unsigned char** text, size_t* len, int64_t* line, char* err, size_t errlen);
// \u escapes of lone surrogates replaced by U+FFFD so far
int64_t jsonl_lone_surrogates(const JsonlReader* r);
void jsonl_close(JsonlReader* r);
// Does NAME end in .jsonl, .ndjson or .json.gz, or .jsonl.gz, .ndjson.gz (the names build/prepare --text-field
// reads as JSON Lines)?
int jsonl_name(const char* name);
