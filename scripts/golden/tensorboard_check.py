"""TensorBoard's own reader against ropelab's event files (run by tensorboard_offline.sh).

    python3 tensorboard_check.py LOGDIR

LOGDIR holds ropelab runs (each with metrics.h5 and tensorboard/). TensorBoard's data pipeline
reads it as `tensorboard --logdir LOGDIR` does: its EventMultiplexer (with the purge of a
restarted run's rows) and the MultiplexerDataProvider that serves the scalars dashboard, with
no downsampling. For each run, checks:

- the scalars plugin's time series are exactly metrics.h5's train and valid series (every tag,
  every step, every value as float64), plus the eval/ and probe/ results where those were run;
- the text plugin has the config, and the hparams plugin's session_start_info (parsed by the
  plugin's own metadata module) has the run's settings; the session ended with success.

Prints one line per run and "tensorboard_check: all agree", or exits 1 naming the difference.
"""
import math
import os
import sys

import h5py
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util


def metrics_h5(run_dir):
    want = {}
    with h5py.File(os.path.join(run_dir, "metrics.h5"), "r") as f:
        for g in ("train", "valid"):
            steps = f[g]["step"][()]
            for k in f[g]:
                if k != "step":
                    want[f"{g}/{k}"] = {int(s): float(v) for s, v in zip(steps, f[g][k][()])}
    return want


def main(logdir):
    mux = plugin_event_multiplexer.EventMultiplexer(
        size_guidance={"tensors": 0, "scalars": 0}, purge_orphaned_data=True)
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    ctx = context.RequestContext()
    scalars = provider.read_scalars(ctx, experiment_id="", plugin_name="scalars",
                                    downsample=10**9)
    bad = 0
    runs = sorted(mux.Runs())
    if not runs:
        raise SystemExit(f"tensorboard_check: TensorBoard found no runs under {logdir}")
    for run in runs:
        run_dir = os.path.dirname(os.path.join(logdir, run))  # RUN/tensorboard -> RUN
        want = metrics_h5(run_dir)
        got = {tag: {d.step: d.value for d in data} for tag, data in scalars.get(run, {}).items()}
        results = {t for t in got if t.startswith(("eval/", "probe/"))}
        problems = []
        if set(got) - results != set(want):
            problems.append(f"tags differ: {sorted(set(got) - results ^ set(want))[:6]}")
        for tag, rows in want.items():
            g = got.get(tag, {})
            if set(g) != set(rows):
                problems.append(f"{tag}: steps differ ({len(g)} against {len(rows)})")
                continue
            for step, v in rows.items():
                if not (g[step] == v or (math.isnan(g[step]) and math.isnan(v))):
                    problems.append(f"{tag} at step {step}: {g[step]!r} against {v!r}")
                    break
        texts = mux.Tensors(run, "config")
        config = tensor_util.make_ndarray(texts[0].tensor_proto).item().decode()
        if "position:" not in config:
            problems.append("the config text lacks the position section")
        content = mux.SummaryMetadata(run, hparams_metadata.SESSION_START_INFO_TAG)
        start = hparams_metadata.parse_session_start_info_plugin_data(
            content.plugin_data.content)
        hp = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
              for k, v in start.hparams.items()}
        if "model.position.type" not in hp:
            problems.append("the hparams lack model.position.type")
        end = mux.SummaryMetadata(run, hparams_metadata.SESSION_END_INFO_TAG)
        status = hparams_metadata.parse_session_end_info_plugin_data(
            end.plugin_data.content).status
        if status != 1:
            problems.append(f"session end status {status}, not STATUS_SUCCESS")
        n = sum(len(r) for r in want.values())
        if problems:
            bad += 1
            print(f"{run}: DIFFERS: " + "; ".join(problems))
        else:
            print(f"{run}: {n} scalars of metrics.h5 equal, {len(results)} result tags, "
                  f"{len(hp)} hparams (position {hp['model.position.type']}), config text")
    if bad:
        raise SystemExit(f"tensorboard_check: {bad} run(s) differ")
    print("tensorboard_check: all agree")


if __name__ == "__main__":
    main(sys.argv[1])
