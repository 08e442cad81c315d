// doclen.h — the document length distribution of a data set (choosing pack and upsampling needs it): a table,
// a CSV and an SVG bar chart over log2 length buckets [1, 2), [2, 4), ..., each with its share of the documents
// and of the tokens.
//   CSV  bucket_lo,bucket_hi,documents,tokens,frac_documents,frac_tokens     one row per bucket with a document
// Summary line: documents, tokens, median / 90th percentile / longest length; with a window of W tokens, the
// share of documents (and of their tokens) that fit one window, and the share a stream window would hold whole.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

// (The lengths: data/pack.h pack_doc_lengths, or a writer's own count.)
// Table and summary on f; CSV and SVG when csv / svg are not NULL (0, or 1 with err). window 0: no window lines.
int doclen_report(FILE* f, const int64_t* lens, int64_t n, int64_t window, const char* title, const char* csv,
                  const char* svg, char* err, size_t errlen);
