"""Passages in an Arrow table: a `datasets` save_to_disk folder, a Parquet file, a folder of Parquet
shards, DPR's passages TSV (`psgs_w100.tsv`) or `hf:NAME[:CONFIG]:SPLIT`.

wiki_dpr's schema is the model: `id` and `text` strings, an optional `title`, and an optional
`embeddings` column (one list of floats per passage, the DPR context encoder's vectors). A
`PassageTable` is a `Sequence[Passage]` over the table itself: a save_to_disk folder and a hub
dataset stay memory-mapped, a Parquet file (or a folder of shards: the hub's own files of
wiki_dpr, `data/psgs_w100/nq/train-*.parquet`, read where they were downloaded) is
decoded a row group at a time as rows are read (`RowGroups`: a few groups in memory, not the
files), a TSV is parsed into Arrow strings once (`read_dpr_tsv`: memory about the text's size) or
converted, streaming, into such a folder of shards (`write_tsv_shards`, `lewisrag shard`: the same
rows and refusals, memory of a few blocks), and rows become `Passage`s only when read,
one batch at a time. The checks the JSON
readers make per record are made here per column, on Arrow batches (pyarrow.compute), with the
same messages: `file:row: field 'name': message`, rows counted from 1.
"""

from lewisrag.data.passages.parquet import SHARD_NAME, RowGroups, check_numbered_shards
from lewisrag.data.passages.schema import COLUMNS, PASSAGE_SCHEMA, TEXT_COLUMNS, as_text, row_problems, text_schema
from lewisrag.data.passages.shards import KIND_SHARDS, SHARD_ROWS, SHARD_STEM, write_tsv_shards
from lewisrag.data.passages.sources import is_table_source, open_passages, open_table, passages_at
from lewisrag.data.passages.table import PassageTable
from lewisrag.data.passages.tsv import BLANK_LINE, DPR_TSV_HEADER, DPR_TSV_SCHEMA, LINE_BREAK, dpr_tsv_batches, read_dpr_tsv
from lewisrag.data.records import read_passages

# Not re-exported: the sizes tests shrink (BATCH_ROWS, SCAN_ROWS, VECTOR_SCAN_ROWS in `table`, TSV_BLOCK
# in `tsv`, ROW_GROUP_ROWS in `shards`) and the private helpers. The code reads each in its own module,
# so set one there (`monkeypatch.setattr(passages.tsv, "TSV_BLOCK", ...)`): a copy here would take no effect.

__all__ = ["BLANK_LINE", "COLUMNS", "DPR_TSV_HEADER", "DPR_TSV_SCHEMA", "KIND_SHARDS", "LINE_BREAK", "PASSAGE_SCHEMA",
           "SHARD_NAME", "SHARD_ROWS", "SHARD_STEM", "TEXT_COLUMNS", "PassageTable", "RowGroups", "as_text",
           "check_numbered_shards", "dpr_tsv_batches", "is_table_source", "open_passages", "open_table",
           "passages_at", "read_dpr_tsv", "read_passages", "row_problems", "text_schema", "write_tsv_shards"]
