"""Run the token workload (issue 23, item 6) and collect its report.

``files`` uint16 token files (see :mod:`tierload_tools.bench.tokens.data`) are served by the emulated
S3 (latency and bandwidth caps as the default workload's) as a stored bucket, and kept on local
disk. The contenders read the same windows of ``seq_len + 1`` tokens for ``epochs`` epochs, each
in its own process, one after the other:

* ``memmap-local`` (the upper bound): the local files, memory-mapped; their pages are dropped from
  the page cache first, so its epoch 1 reads the disk.
* ``tierload-tokens``: ``TieredDataset(layout="tokens")`` over the emulated S3, hot tier
  ``hot_fraction`` of the corpus.
* ``litdata-tokens``: LitData's ``TokensLoader`` over its converted copy (``litdata-convert``, timed,
  reads the corpus through the emulated S3 and writes chunks back to it), cache = the hot tier's
  capacity; from the peers' environment, or ``not run`` with the reason.

Every epoch's :class:`~tierload_tools.bench.tokens.data.WindowDigest` must be the same for every
contender (``digests_match``).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from tierload_tools.bench.run import check_importable, find_peers_python, machine_info
from tierload_tools.bench.small.run import _Runner

BUCKET, PREFIX, LITDATA_BUCKET = "tokens-bench", "tokens", "tokens-litdata"
MODULE = "tierload_tools.bench.tokens.contenders"
PEER_MODULE = "tierload_tools.bench.tokens.litdata_tokens"
MIB = 2**20


@dataclass(frozen=True)
class TokenOptions:
    """One run of the token workload.

    Attributes:
        files: Token files.
        tokens_per_file: uint16 tokens per file (2 bytes each).
        seq_len: Tokens per window minus one.
        epochs: Epochs per contender.
        batch_size: Windows per batch.
        num_workers: DataLoader workers.
        hot_fraction: tierload's hot tier and LitData's cache, as a fraction of the corpus's bytes.
        latency_ms, connection_mb_s, total_mb_s: The emulated link (see
            :class:`tierload_tools.bench.emulated_s3.LinkSettings`).
        peers: Run LitData when its environment has it.
        peers_python: Interpreter of the peers' environment (None: benchmarks/.venv-peers).
        cache_dir: Where the corpus is kept (None: ``~/.cache/tierload/bench``).
        seed: Tokens' and shuffle seed.
    """

    files: int = 64
    tokens_per_file: int = 16 * MIB  # 32 MiB a file, 2 GiB in all
    seq_len: int = 2048
    epochs: int = 3
    batch_size: int = 8
    num_workers: int = 2
    hot_fraction: float = 0.25
    latency_ms: float = 20.0
    connection_mb_s: float = 4.0
    total_mb_s: float = 16.0
    peers: bool = True
    peers_python: str | None = None
    cache_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.files, self.tokens_per_file, self.seq_len, self.epochs, self.batch_size) < 1:
            raise ValueError(f"files, tokens_per_file, seq_len, epochs, batch_size must be >= 1: {self}")
        if self.files * self.tokens_per_file < self.seq_len + 1:
            raise ValueError(f"{self.files} x {self.tokens_per_file} tokens hold no window of seq_len + 1 = "
                             f"{self.seq_len + 1}; raise tokens_per_file")
        if self.num_workers < 0 or not 0 < self.hot_fraction <= 1:
            raise ValueError(f"need num_workers >= 0 and 0 < hot_fraction <= 1: {self}")

    @property
    def total_bytes(self) -> int:
        return self.files * self.tokens_per_file * 2

    @classmethod
    def quick(cls) -> "TokenOptions":
        """The CI smoke size: 4 files of 1 MiB, 2 epochs."""
        return cls(files=4, tokens_per_file=512 * 1024, epochs=2)


def _litdata(options: TokenOptions, runner: _Runner, setup: dict[str, Any], report: dict[str, Any],
             counters: Callable[[], dict[str, int]]) -> None:
    python = find_peers_python(options.peers_python)
    reason = "the peers' environment is missing (bash benchmarks/setup_peers.sh)" if python is None else \
        check_importable(python, "litdata")
    if reason is not None:
        report["not_run"]["litdata-tokens"] = f"not run: {reason}"
        runner.echo(f"litdata-tokens: not run: {reason}")
        return
    assert python is not None
    window_bytes = (options.seq_len + 1) * 2
    chunk_bytes = min(64 * MIB, max(MIB, int(options.total_bytes * options.hot_fraction) // 16))
    peer_setup = {**setup, "litdata_url": f"s3://{LITDATA_BUCKET}/litdata", "workdir": None,
                  "chunk_windows": max(1, chunk_bytes // window_bytes)}
    before = counters()
    convert = runner.contender("litdata-convert", peer_setup, module=PEER_MODULE, python=python)
    after = counters()
    convert["s3"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    report["conversion"] = convert
    if convert.get("ok"):
        runner.echo(f"litdata-convert: {convert['seconds']:.1f} s")
        report["contenders"]["litdata-tokens"] = runner.contender("litdata-tokens", peer_setup, module=PEER_MODULE,
                                                                  python=python)
    else:
        report["contenders"]["litdata-tokens"] = {"ok": False, "error": f"conversion failed: {convert.get('error')}"}


def _digests(report: dict[str, Any], windows: int) -> None:
    """``report["digests"]``: each contender's digest per epoch; ``digests_match``: all one digest,
    of ``windows`` windows, every epoch."""
    digests = {name: [row["digest"] for row in run.get("epochs", [])]
               for name, run in report["contenders"].items() if run.get("ok")}
    seen = {digest for rows in digests.values() for digest in rows}
    report["digests"] = digests
    report["digests_match"] = len(seen) == 1 and next(iter(seen)).startswith(f"{windows}:")


def run_tokens(options: TokenOptions, out_dir: Path, echo: Callable[[str], None] = print,
               timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run the token workload; returns its report (see :mod:`tierload_tools.bench.tokens.report`).

    Raises:
        ServiceError: moto's server could not be started.
        RuntimeError: The emulated S3 could not be started.
    """
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.bench.small.data import cache_root, set_page_cache
    from tierload_tools.bench.tokens.data import TokenStream, stored_tokens, token_files
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    started = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    runner = _Runner(out_dir, echo, timeout_s)
    report: dict[str, Any] = {"workload": "tokens", "options": asdict(options), "machine": machine_info(),
                              "contenders": {}, "not_run": {}}
    root = cache_root(options.cache_dir)
    paths = token_files(root, options.files, options.tokens_per_file, options.seed)
    bucket_dir = stored_tokens(root, paths, PREFIX)
    window = options.seq_len + 1
    windows = TokenStream(paths, window).windows
    echo(f"corpus: {options.files} files x {options.tokens_per_file} uint16 tokens ({options.total_bytes / MIB:.0f} "
         f"MiB), {windows} windows of {window} tokens (ready in {time.perf_counter() - started:.1f} s)")
    link = LinkSettings(options.latency_ms, options.connection_mb_s, options.total_mb_s)
    report["link"] = {**asdict(link), "description": link.describe()}
    report["dataset"] = {"url": f"s3://{BUCKET}/{PREFIX}", "files": options.files, "bytes": options.total_bytes,
                         "tokens": options.files * options.tokens_per_file, "windows": windows, "window": window,
                         "local": str(paths[0].parent)}
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link, {BUCKET: f"stored:{bucket_dir}"}) as emulated:
        storage = {**CREDENTIALS, "client_kwargs": {"endpoint_url": emulated.endpoint_url, "region_name": "us-east-1"}}
        setup = {"paths": [str(p) for p in paths], "url": report["dataset"]["url"], "storage_options": storage,
                 "endpoint_url": emulated.endpoint_url, "seq_len": options.seq_len, "epochs": options.epochs,
                 "batch_size": options.batch_size, "num_workers": options.num_workers, "seed": options.seed,
                 "hot_bytes": int(options.total_bytes * options.hot_fraction), "windows": windows,
                 "keys": [f"{PREFIX}/{p.name}" for p in paths], "file_tokens": [options.tokens_per_file] * len(paths),
                 "boto_options": {"endpoint_url": emulated.endpoint_url, "aws_access_key_id": CREDENTIALS["key"],
                                  "aws_secret_access_key": CREDENTIALS["secret"], "region_name": "us-east-1"}}
        set_page_cache(paths[0].parent, "cold")
        report["contenders"]["memmap-local"] = runner.contender("memmap-local", setup, module=MODULE)
        report["contenders"]["tierload-tokens"] = runner.contender("tierload-tokens", setup, module=MODULE)
        if options.peers:
            s3.create_bucket(LITDATA_BUCKET)
            _litdata(options, runner, setup, report, emulated.counters)
    _digests(report, windows)
    shutil.rmtree(out_dir / "work", ignore_errors=True)
    report["wall_s"] = time.perf_counter() - started
    return report
