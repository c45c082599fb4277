"""Export torchvision/transformers models to ONNX and run onnxruntime on them (bench/real_models.py's helper).

Runs with the export venv's Python (``.venv-export``, Python 3.11: torch,
torchvision, transformers, onnx, onnxruntime), never the TVM venv's: the two
cannot share one interpreter. ``bench/real_models.py`` calls it in a
subprocess and reads what it writes. It imports torch, onnx and onnxruntime
only inside the subcommands, so the TVM venv can import :data:`MODELS` (the
models' input specs) from it.

    python bench/export_onnx.py export NAME OUT.onnx      # OUT.onnx plus OUT.json (inputs, outputs, versions)
    python bench/export_onnx.py ort-serve MODEL.onnx IN.npz OUT.npz [--threads 1] [--min-repeat-ms 200]
                                    # outputs saved, one JSON line, then a timing (seconds) per "time" line
    python bench/export_onnx.py versions                  # JSON: the export venv's package versions

Models: random weights from ``torch.manual_seed(0)``, batch 1, ``.eval()``,
TorchScript exporter (``dynamo=False``), opset 14, static shapes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

OPSET = 14
SEQ_LEN = 128
IMAGE = [1, 3, 224, 224]

#: model -> its ONNX inputs: name, shape, dtype and, for integer inputs, the
#: range [low, high) of valid values (token ids below the vocabulary size, a 0/1 mask)
#: torchvision models of issue 15's real-model set (with "bert": ``bench/real_models.py --models all``)
ISSUE_VISION = ("resnet50", "squeezenet1_1", "googlenet", "densenet121", "shufflenet_v2_x1_0")
#: more torchvision models a user brings, each with ops or forms the issue's set lacks (ReLU6 inverted
#: residuals, hardswish and squeeze-excitation, SiLU, 32-group convolutions, channels-last layer norm and
#: GELU, a ViT whose attention is torch's ``multi_head_attention_forward``, shifted-window attention with
#: torch.roll and a relative position bias, VGG's 100-M-parameter dense layers, MnasNet's 5x5 depthwise
#: convolutions): ``bench/real_models.py --models extra``
EXTRA_VISION = ("mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "resnext50_32x4d", "regnet_y_400mf",
                "convnext_tiny", "vit_b_16", "swin_t", "vgg16", "mnasnet1_0")
class Transformer(NamedTuple):
    """A transformers model to export (random weights; it returns its last hidden state)."""

    config: str                 # the config class (its defaults, less ``config_args``)
    model: str                  # the model class
    vocab: int                  # the tokenizer's vocabulary size: input ids are drawn below it
    config_args: dict = {}
    model_args: dict = {}


#: bert is in issue 15's set; the others are more a user brings: distilbert (nn.Linear layers as ONNX
#: MatMul + Add, like BERT's), gpt2 (Conv1D layers as Gemm on the flattened tokens, a causal mask, tanh
#: GELU), roberta (position ids from a cumulative sum over the tokens), opt (OPT-125m's shape: a decoder,
#: ReLU), t5_encoder (t5-small's encoder: RMS norm, relative position buckets from integer ops),
#: llama_small (a Llama of BERT-base's width, 12 layers: RMS norm, rotary embeddings, SiLU gates)
TRANSFORMERS = {"bert": Transformer("BertConfig", "BertModel", 30522, model_args={"add_pooling_layer": False}),
                "distilbert": Transformer("DistilBertConfig", "DistilBertModel", 30522),
                "gpt2": Transformer("GPT2Config", "GPT2Model", 50257),
                "roberta": Transformer("RobertaConfig", "RobertaModel", 50265,
                                       model_args={"add_pooling_layer": False}),
                "opt": Transformer("OPTConfig", "OPTModel", 50272),
                "t5_encoder": Transformer("T5Config", "T5EncoderModel", 32128),
                "llama_small": Transformer("LlamaConfig", "LlamaModel", 32000,
                                           {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
                                            "num_attention_heads": 12, "num_key_value_heads": 12})}


def _token_inputs(vocab: int) -> list[dict]:
    return [{"name": "input_ids", "shape": [1, SEQ_LEN], "dtype": "int64", "low": 0, "high": vocab},
            {"name": "attention_mask", "shape": [1, SEQ_LEN], "dtype": "int64", "low": 0, "high": 2}]


MODELS: dict[str, list[dict]] = {
    **{name: [{"name": "input", "shape": IMAGE, "dtype": "float32"}] for name in ISSUE_VISION + EXTRA_VISION},
    **{name: _token_inputs(t.vocab) for name, t in TRANSFORMERS.items()},
}
OUTPUT_NAMES = {name: ["last_hidden_state"] for name in TRANSFORMERS}


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def _torch_model(name: str):
    """The model (``.eval()``) and example inputs for tracing."""
    import torch

    torch.manual_seed(0)
    if name in TRANSFORMERS:
        import transformers

        spec = TRANSFORMERS[name]
        config = getattr(transformers, spec.config)(**spec.config_args)
        assert spec.vocab == config.vocab_size
        core = getattr(transformers, spec.model)(config, **spec.model_args).eval()

        class LastHiddenState(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.add_module(name, core)  # the module's name prefixes the ONNX nodes' ("/bert/encoder/...")

            def forward(self, input_ids, attention_mask):
                return core(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        ids = torch.randint(0, config.vocab_size, (1, SEQ_LEN), dtype=torch.int64)
        # padding at the end: a mask of ones only could let the model take a no-mask branch while tracing
        mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
        mask[:, SEQ_LEN * 3 // 4:] = 0
        return LastHiddenState().eval(), (ids, mask)
    import torchvision

    extra = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **extra).eval()
    # torchvision zero-initializes some layers (ViT's classification head): a model whose output is 0
    # whatever its input checks nothing, so such weights get a small random init instead
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.any():
                torch.nn.init.normal_(m.weight, std=0.02)
    return model, (torch.randn(*IMAGE),)


def export(name: str, out: Path) -> dict:
    """Export ``name`` to ``out`` (written under a temporary name, then renamed, so an interrupted
    export leaves no file) and ``out`` with suffix .json (inputs, outputs, versions, seconds)."""
    import onnx
    import torch

    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    torch.backends.mha.set_fastpath_enabled(False)
    t0 = time.perf_counter()
    model, example = _torch_model(name)
    inputs = MODELS[name]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp.onnx")
    with torch.no_grad():
        torch.onnx.export(model, example, str(tmp), dynamo=False, opset_version=OPSET,
                          input_names=[i["name"] for i in inputs], output_names=OUTPUT_NAMES.get(name, ["output"]),
                          do_constant_folding=True)
    proto = onnx.load(str(tmp))
    onnx.checker.check_model(proto)
    graph_inputs = [i.name for i in proto.graph.input]
    missing = [i["name"] for i in inputs if i["name"] not in graph_inputs]
    if missing:  # the exporter drops inputs the traced graph does not use
        tmp.unlink()
        raise SystemExit(f"{name}: the exported graph does not use input(s) {missing}")
    meta = {"model": name, "inputs": inputs, "outputs": [o.name for o in proto.graph.output], "opset": OPSET,
            "export_s": time.perf_counter() - t0, "versions": _versions()}
    tmp.replace(out)
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def ort_timing(run, min_repeat_ms: float) -> float:
    """One timing: the mean seconds of as many calls of ``run`` as fill ``min_repeat_ms``."""
    n, t0 = 0, time.perf_counter()
    while True:
        run()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed * 1e3 >= min_repeat_ms:
            return elapsed / n


def serve_timings(run, min_repeat_ms: float, stdin, stdout) -> int:
    """Answer each line ``time`` read from ``stdin`` with one :func:`ort_timing` of ``run`` (its
    seconds, one line on ``stdout``), until ``quit`` or the end of ``stdin``; any other line is
    refused on stderr and ends the loop (exit status 2). Returns the timings answered."""
    answered = 0
    for line in stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd != "time":
            print(f"ort-serve: unknown command {cmd!r} (time or quit)", file=sys.stderr)
            raise SystemExit(2)
        stdout.write(f"{ort_timing(run, min_repeat_ms)!r}\n")
        stdout.flush()
        answered += 1
    return answered


def ort_serve(model: Path, inputs: Path, outputs: Path, threads: int, min_repeat_ms: float) -> None:
    """onnxruntime on one model, timed when asked (the subcommand ``ort-serve``, which a bench
    drives through ``export_venv.OrtProcess``): run it on the arrays in ``inputs`` (.npz, keyed by
    input name), save its outputs (.npz, ``output_0``, ``output_1``...), take one warm-up timing,
    print one JSON line (the first run's seconds, providers, versions), then
    :func:`serve_timings` — so that its timings can be interleaved with another runtime's, round by
    round, on the same machine state."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
    with np.load(inputs) as z:
        feed = {i.name: z[i.name] for i in sess.get_inputs()}
    t0 = time.perf_counter()
    result = sess.run(None, feed)
    first = time.perf_counter() - t0
    np.savez(outputs, **{f"output_{k}": r for k, r in enumerate(result)})
    ort_timing(lambda: sess.run(None, feed), min_repeat_ms)  # warm-up
    print(json.dumps({"first_run_s": first, "threads": threads, "inter_op_threads": 1, "min_repeat_ms": min_repeat_ms,
                      "providers": sess.get_providers(), "versions": _versions()}), flush=True)
    serve_timings(lambda: sess.run(None, feed), min_repeat_ms, sys.stdin, sys.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export", help="export a model to ONNX")
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("out", type=Path)
    p = sub.add_parser("ort-serve", help="run onnxruntime on saved inputs, then time it on each 'time' line read")
    p.add_argument("model", type=Path)
    p.add_argument("inputs", type=Path)
    p.add_argument("outputs", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-repeat-ms", type=float, default=200.0)
    sub.add_parser("versions", help="print the package versions")
    args = ap.parse_args(argv)
    if args.cmd == "export":
        meta = export(args.name, args.out)
        print(f"exported {args.name} to {args.out} in {meta['export_s']:.1f} s")
    elif args.cmd == "ort-serve":
        ort_serve(args.model, args.inputs, args.outputs, args.threads, args.min_repeat_ms)
    else:
        print(json.dumps(_versions()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
