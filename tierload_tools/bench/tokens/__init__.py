"""The token workload of ``tierload bench`` (issue 23, item 6): uint16 token files read as windows
of ``seq_len + 1`` tokens, through tierload over the emulated S3, beside a memory-mapped loader of
the same files from local disk and LitData's ``TokensLoader`` over its converted copy.
See :mod:`tierload_tools.bench.tokens.run`."""
