"""A benchmark model's inputs and the model as a user loads it: seeded random inputs for ONNX
input specs (:func:`make_inputs`), tvmc's ``--input-shapes`` text (:func:`shapes_arg`), an ONNX file
through tvmc's frontend (:func:`load_onnx`) and a zoo model (:func:`load_zoo`), weights bound as the
pass binds them. Used by ``bench/real_models.py``."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


def make_inputs(specs: Sequence[Mapping], seed: int = 0) -> dict:
    """Seeded random inputs for ONNX input specs: floats standard normal (passes.runtime.random_inputs),
    integers uniform in the spec's [low, high) (token ids, a 0/1 mask)."""
    import numpy as np

    from relay_eqsat.passes.runtime.build import random_inputs

    out = random_inputs({s["name"]: (s["shape"], s["dtype"]) for s in specs}, seed)
    rng = np.random.default_rng(seed + 1)
    for s in specs:
        if "high" in s:
            out[s["name"]] = rng.integers(s.get("low", 0), s["high"], size=tuple(s["shape"])).astype(s["dtype"])
    return out


def shapes_arg(specs: Sequence[Mapping]) -> str:
    """tvmc's --input-shapes syntax: ``"input_ids:[1,128] attention_mask:[1,128]"``."""
    return " ".join(f"{s['name']}:[{','.join(str(d) for d in s['shape'])}]" for s in specs)


def load_onnx(path: Path, specs: Sequence[Mapping]):
    """The model as a user loads it (tvmc's ONNX frontend), weights bound as the pass binds them;
    ValueError if its inputs are not the specs'."""
    from relay_eqsat.passes.cli.optimize import load_model
    from relay_eqsat.passes.relay.eqsat_pass import bind_params

    mod, params = load_model(str(path), input_shapes=shapes_arg(specs))
    bound = bind_params(mod, params)
    got = [(v.name_hint, [int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
           for v in bound["main"].params]
    want = [(s["name"], list(s["shape"]), s["dtype"]) for s in specs]
    if got != want:
        raise ValueError(f"{path.name}: TVM's main takes {got}, expected {want}")
    return bound


def load_zoo(name: str, small: bool, seed: int = 0):
    """A zoo model, weights bound, and seeded random inputs."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.eqsat_pass import bind_params
    from relay_eqsat.passes.runtime.build import random_inputs

    mod, params = zoo.get(name, small=small)
    bound = bind_params(mod, params)
    types = {v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
             for v in bound["main"].params}
    return bound, random_inputs(types, seed)
