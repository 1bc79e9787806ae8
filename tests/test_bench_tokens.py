"""The token workload of ``tierload bench`` (issue 23, item 6), end to end on a tiny corpus: every
contender reads every window each epoch, the report has the figures, the digests of the windows
read match across contenders (LitData's runs where the peers' environment has it, else it is
reported as not run with the reason)."""

from __future__ import annotations

import dataclasses

import numpy as np


def test_token_workload_smoke(tmp_path):
    from tierload_tools.bench.tokens import report
    from tierload_tools.bench.tokens.run import TokenOptions, run_tokens

    # 3 files of 3,000 tokens, windows of 257: 35 windows cross file boundaries, a 1-token tail dropped
    options = dataclasses.replace(TokenOptions.quick(), files=3, tokens_per_file=3000, seq_len=256, batch_size=4,
                                  cache_dir=str(tmp_path / "data"))
    result = run_tokens(options, tmp_path / "out", echo=lambda line: None, timeout_s=300)
    paths = report.write(result, tmp_path / "out")
    windows = 9000 // 257
    assert result["dataset"]["windows"] == windows
    contenders = result["contenders"]
    assert {"memmap-local", "tierload-tokens"} <= set(contenders)
    assert "litdata-tokens" in set(contenders) | set(result["not_run"])
    assert all(run["ok"] for run in contenders.values()), {n: r.get("error") for n, r in contenders.items()}
    for run in contenders.values():
        assert [row["samples"] for row in run["epochs"]] == [windows] * options.epochs
        assert all(row["tokens"] == windows * 257 and row["samples_per_s"] > 0 and row["tokens_per_s"] > 0
                   for row in run["epochs"])
    assert result["digests_match"], result["digests"]
    tier = contenders["tierload-tokens"]["epochs"]
    # epoch 1 reads every file (less the few tokens a window carries over a file boundary: read with the manifest)
    assert tier[0]["s3_gets"] >= options.files and tier[0]["s3_bytes"] > 0
    assert all(row["s3_gets"] == 0 for row in contenders["memmap-local"]["epochs"])
    figures = report.figures(result)
    assert figures["tierload-tokens"]["epoch1_of_link_bound"] > 0
    text = paths["txt"].read_text()
    assert "link bound" in text and "digests of the windows read match across contenders and epochs: True" in text


def test_window_digest_is_order_free_and_sees_every_token(tmp_path):
    """The digest the smoke test relies on: the same windows in any order (and batching) digest the
    same; a changed token or two swapped tokens in one window do not."""
    from tierload_tools.bench.tokens.data import TokenStream, WindowDigest, token_files

    stream = TokenStream(token_files(tmp_path, 2, 1000, seed=1), 101)
    windows = np.stack([stream.window_tokens(k) for k in range(stream.windows)]).astype(np.int64)
    assert stream.windows == 19 and np.array_equal(windows.ravel(), np.concatenate(
        [np.fromfile(p, dtype="<u2") for p in stream.paths])[:19 * 101])

    def digest(*batches):
        d = WindowDigest(101)
        for batch in batches:
            d.add(batch)
        return d.hexdigest()

    reference = digest(windows)
    assert digest(windows[::-1][:7], windows[::-1][7:]) == reference
    changed, swapped = windows.copy(), windows.copy()
    changed[3, 50] += 1
    swapped[3, [0, 1]] = swapped[3, [1, 0]]
    assert windows[3, 0] != windows[3, 1]
    assert digest(changed) != reference and digest(swapped) != reference and digest(windows[1:]) != reference
