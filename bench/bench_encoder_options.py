r"""Other ways to make MiniLM cheaper on a CPU: ONNX Runtime, int8, a shorter maximum sequence length.

The question: can the exact encoder of today's decisions (all-MiniLM-L6-v2, what ``dtype=auto`` runs on this CPU)
be made >= 20x cheaper while its vectors stay the same? Each option encodes the same seeded sample of DeepScaleR
problems (length-sorted batches of 64, as ``curate.embed`` does), alternating with the baseline, best of
``--rounds``, and is compared with the baseline on

- CPU ms per problem (process CPU time, the steady figure on a shared box) and the ratio to the baseline;
- per-problem cosine to the baseline's vector (min / mean): decisions are cosine thresholds (0.85 leaks, 0.95
  near-duplicates), so an option whose vectors move by more than ~0.005 moves decisions near them.

Options: ``onnx`` (the same graph exported with ``torch.onnx.export``, ONNX Runtime, all graph optimizations),
``onnx-int8`` (ONNX Runtime dynamic quantization, int8 weights, per channel), ``trunc128`` / ``trunc64`` (MiniLM
with ``max_seq_length`` 128 / 64 instead of 256; the token share they save is printed over the whole pool).

ONNX Runtime is not a project dependency (nothing here is fast enough to adopt); install it beside the project to
run this: ``pip install onnxruntime onnx``. Needs the DeepScaleR pool ingested by ``bench_embed.py`` in ``--home``.

    nice -n 10 .venv/bin/python bench/bench_encoder_options.py --home /tmp/bench-embed-ws [--sample 512 --rounds 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_k, "1")


def export_onnx(st, folder: Path) -> tuple[Path, Path]:
    """MiniLM + mean pooling + L2 normalisation as one ONNX graph, and its int8 (dynamic, per-channel) copy."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    class Pooled(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            out = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(out.dtype)
            return torch.nn.functional.normalize((out * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)

    fp32, int8 = folder / "minilm.onnx", folder / "minilm.int8.onnx"
    enc = st.tokenizer(["a b", "a longer text"], padding=True, return_tensors="pt")
    torch.onnx.export(
        Pooled(st[0].auto_model.eval()),
        (enc["input_ids"], enc["attention_mask"]),
        str(fp32),
        input_names=["ids", "mask"],
        output_names=["v"],
        dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}},
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    return fp32, int8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", default="/tmp/bench-embed-ws")
    p.add_argument("--pool", default="ds")
    p.add_argument("--sample", type=int, default=512)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch / ONNX Runtime intra-op threads")
    args = p.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        raise SystemExit("needs ONNX Runtime: pip install onnxruntime onnx") from None
    import torch

    from curate import io
    from curate import schema as S
    from curate.embed import encoder_path

    torch.set_num_threads(args.threads)
    ws = io.Workspace.resolve(args.home)
    texts_all = io.read_parquet(ws.table(args.pool, "problems"), S.PROBLEMS)[S.PROBLEM].to_list()
    rng = np.random.default_rng(0)
    texts = sorted((texts_all[i] for i in rng.choice(len(texts_all), args.sample, replace=False)), key=len)

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(encoder_path("minilm"), device="cpu")
    tok = st.tokenizer
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    tmp = Path(tempfile.mkdtemp(prefix="bench_onnx_"))
    fp32, int8 = export_onnx(st, tmp)
    sessions = {name: ort.InferenceSession(str(f), so, providers=["CPUExecutionProvider"]) for name, f in
                (("onnx", fp32), ("onnx-int8", int8))}  # fmt: skip

    def torch_encode(max_len: int):
        def run():
            st.max_seq_length = max_len
            return st.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

        return run

    def ort_encode(name: str):
        def run():
            out = []
            for a in range(0, len(texts), 64):
                e = tok(texts[a : a + 64], padding=True, truncation=True, max_length=256, return_tensors="np")
                feed = {"ids": e["input_ids"].astype(np.int64), "mask": e["attention_mask"].astype(np.int64)}
                out.append(sessions[name].run(None, feed)[0])
            return np.concatenate(out)

        return run

    options = {"baseline": torch_encode(256), "onnx": ort_encode("onnx"), "onnx-int8": ort_encode("onnx-int8"),
               "trunc128": torch_encode(128), "trunc64": torch_encode(64)}  # fmt: skip
    best: dict[str, float] = {}
    vecs: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for name, fn in options.items():
            c0 = time.process_time()
            vecs[name] = fn()
            ms = 1000 * (time.process_time() - c0) / len(texts)
            best[name] = min(best.get(name, ms), ms)
            print(f"round {r}: {name:10s} {ms:6.1f} CPU ms/problem", flush=True)

    lengths = np.array([len(x) for x in tok(texts_all, add_special_tokens=True)["input_ids"]])
    full = np.minimum(lengths, 256).sum()
    print(f"\n{len(texts)} DeepScaleR problems, {args.threads} thread(s); token lengths over the pool of "
          f"{len(texts_all)}: median {int(np.median(lengths))}, p90 {int(np.percentile(lengths, 90))}\n")  # fmt: skip
    print("| option | CPU ms/problem | speed vs MiniLM float32 | cosine to it (min / mean) | note |")
    print("|---|---:|---:|---|---|")
    for name in options:
        cos = np.einsum("ij,ij->i", vecs[name], vecs["baseline"])
        note = ""
        if name.startswith("trunc"):
            m = int(name[5:])
            note = (f"{(lengths > m).mean():.0%} of the pool truncated; "
                    f"{1 - np.minimum(lengths, m).sum() / full:.0%} fewer tokens")  # fmt: skip
        print(f"| {name} | {best[name]:.1f} | {best['baseline'] / best[name]:.2f}x | {cos.min():.4f} / "
              f"{cos.mean():.4f} | {note} |")  # fmt: skip


if __name__ == "__main__":
    main()
