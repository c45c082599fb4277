"""TensorGraph: construction, hash-consing, validation, compaction, evaluation."""
import numpy as np
import pytest

from relay_eqsat.graph import Attrs, Node, TensorGraph, TensorType, TupleType
from relay_eqsat.ops import ShapeError


def small_graph():
    """x[2, 6] -> split at 2 -> (a[2, 2], b[2, 4]); out = (relu(a), b * w)."""
    g = TensorGraph()
    x = g.var("x", (2, 6))
    w = g.const(np.full((2, 4), 2.0, dtype="float32"), "w")
    parts = g.add("split", [x], {"indices": (2,), "axis": 1})
    a = g.add("tuple_get_item", [parts], {"index": 0})
    b = g.add("tuple_get_item", [parts], {"index": 1})
    r = g.add("nn.relu", [a])
    m = g.add("multiply", [b, w])
    out = g.add("tuple", [r, m])
    g.set_output(out)
    return g


def test_types_are_inferred():
    g = small_graph()
    assert g[2].type == TupleType((TensorType((2, 2)), TensorType((2, 4))))
    assert g[g.output].type == TupleType((TensorType((2, 2)), TensorType((2, 4))))
    assert g[1].op == "constant" and g[1].type == TensorType((2, 4), "float32")
    assert len(g) == 8
    assert g.inputs == [0]
    assert g.input_types() == {"x": TensorType((2, 6))}


def test_type_properties():
    t = TensorType((2, 3), "float16")
    assert (t.ndim, t.size, t.nbytes) == (2, 6, 12)
    assert TensorType(()).size == 1
    assert TupleType((t, TensorType((4,)))).nbytes == 12 + 16
    assert TensorType([np.int64(2), 3]).shape == (2, 3)
    assert repr(t) == "float16[2, 3]"


def test_hash_consing_shares_equal_nodes():
    g = TensorGraph()
    x = g.var("x", (4,))
    a = g.add("exp", [x])
    assert g.add("exp", [x]) == a
    assert g.add("exp", [x], {}) == a
    assert g.add("exp", [x], dedup=False) != a
    c1 = g.add("clip", [x], {"a_min": 0.0, "a_max": 1.0})
    assert g.add("clip", [x], Attrs(a_max=1.0, a_min=0.0)) == c1
    assert g.add("clip", [x], {"a_min": 0.0, "a_max": 2.0}) != c1
    assert len(g) == 5


def test_given_type_must_match():
    g = TensorGraph()
    x = g.var("x", (4,))
    assert g.add("exp", [x], type=TensorType((4,))) == 1
    with pytest.raises(ValueError, match="differs from inferred"):
        g.add("tanh", [x], type=TensorType((5,)))


def test_bad_input_ids():
    g = TensorGraph()
    x = g.var("x", (4,))
    for bad in (1, 7, -1):
        with pytest.raises(ValueError, match="not an earlier node"):
            g.add("exp", [bad])
    with pytest.raises(ShapeError):
        g.add("add", [x])
    assert len(g) == 1


def test_duplicate_names():
    g = TensorGraph()
    g.var("x", (4,))
    with pytest.raises(ValueError, match="duplicate input name 'x'"):
        g.var("x", (4,))
    arr = np.zeros(3, "float32")
    c = g.const(arr, "w")
    assert g.const(arr, "w") == c  # the same array under the same name is the same constant
    with pytest.raises(ValueError, match="duplicate constant name 'w'"):
        g.const(np.ones(3, "float32"), "w")
    auto1, auto2 = g.const(np.ones(2, "float32")), g.const(np.zeros(2, "float32"))
    assert auto1 != auto2 and len(g.constants) == 3


def test_validate_accepts_good_graph_and_rejects_broken_ones():
    g = small_graph()
    g.validate()

    no_output = TensorGraph()
    no_output.var("x", (2,))
    with pytest.raises(ValueError, match="output"):
        no_output.validate()

    wrong_type = small_graph()
    n = wrong_type.nodes[5]
    wrong_type.nodes[5] = Node(n.op, n.inputs, n.attrs, TensorType((9,)))
    with pytest.raises(ValueError, match="has type"):
        wrong_type.validate()

    forward = small_graph()
    n = forward.nodes[3]
    forward.nodes[3] = Node(n.op, (6,), n.attrs, n.type)
    with pytest.raises(ValueError, match="not an earlier node"):
        forward.validate()

    missing_const = small_graph()
    del missing_const.constants["w"]
    with pytest.raises(ValueError, match="no value"):
        missing_const.validate()


def test_evaluate_split_tuple_get_item():
    g = small_graph()
    x = np.arange(12, dtype="float32").reshape(2, 6) - 5
    relu_a, bw = g.evaluate({"x": x})
    np.testing.assert_array_equal(relu_a, np.maximum(x[:, :2], 0))
    np.testing.assert_array_equal(bw, x[:, 2:] * 2)
    with pytest.raises(ValueError, match="missing input 'x'"):
        g.evaluate({})


def test_evaluate_casts_inputs_and_calls_opaque():
    g = TensorGraph()
    x = g.var("x", (3,))
    o = g.add_opaque({"op": "cumsum"}, [x], TensorType((3,)), name="cumsum")
    g.set_output(g.add("negative", [o]))
    assert g[o].attrs["name"] == "cumsum" and g.opaque[0] == {"op": "cumsum"}
    with pytest.raises(ValueError, match="opaque_eval"):
        g.evaluate({"x": [1, 2, 3]})
    calls = []

    def opaque_eval(payload, values):
        calls.append(payload["op"])
        assert values[0].dtype == np.float32
        return np.cumsum(values[0])
    np.testing.assert_array_equal(g.evaluate({"x": [1, 2, 3]}, opaque_eval), [-1, -3, -6])
    assert calls == ["cumsum"]
    # opaque nodes are never shared
    assert g.add_opaque({"op": "cumsum"}, [x], TensorType((3,))) != o


def test_is_constant():
    g = TensorGraph()
    x = g.var("x", (2,))
    w = g.const(np.ones(2, "float32"), "w")
    v = g.const(np.ones(2, "float32"), "v")
    wv = g.add("add", [w, v])
    both = g.add("tuple", [w, wv])
    xw = g.add("multiply", [x, wv])
    op = g.add_opaque("f", [w], TensorType((2,)))
    after_opaque = g.add("exp", [op])
    assert g.is_constant() == [False, True, True, True, True, False, False, False]
    assert g.is_constant()[both] and not g.is_constant()[xw] and not g.is_constant()[after_opaque]


def test_compact_drops_dead_nodes_and_renumbers():
    g = TensorGraph()
    x = g.var("x", (2, 3))
    unused_var = g.var("unused", (5,))
    dead = g.add("exp", [x])
    w = g.const(np.ones((2, 3), "float32"), "w")
    g.const(np.zeros(1, "float32"), "dead_const")
    op = g.add_opaque("payload", [x], TensorType((2, 3)))
    s = g.add("add", [op, w])
    g.add("tanh", [dead])
    g.set_output(s)
    assert g.reachable() == [x, w, op, s]
    assert unused_var not in g.reachable()

    c = g.compact()
    c.validate()
    assert [n.op for n in c.nodes] == ["var", "constant", "opaque", "add"]
    assert c.output == 3 and c[3].inputs == (2, 1)
    assert set(c.constants) == {"w"}
    assert c.opaque == {0: "payload"}
    assert c.input_types() == {"x": TensorType((2, 3))}
    inputs = {"x": np.full((2, 3), 3.0, "float32")}
    ev = lambda payload, vals: vals[0] * 2  # noqa: E731
    np.testing.assert_array_equal(c.evaluate(inputs, ev), g.evaluate(inputs, ev))
    # the compacted graph keeps hash-consing: an equal node is found, not appended
    assert c.add("add", [2, 1]) == 3 and len(c) == 4


def test_compact_renames_ops_and_hash_conses_the_new_names():
    g = TensorGraph()
    x = g.var("x", (4, 8))
    s = g.add("sigmoid", [x])
    g.set_output(g.add("tanh", [s]))
    fast = g.compact(rename={"sigmoid": "fast_sigmoid"})
    fast.validate()
    assert [n.op for n in fast.nodes] == ["var", "fast_sigmoid", "tanh"]
    assert fast[1].type == g[s].type and g[s].op == "sigmoid"  # the input graph is left as it was
    inputs = {"x": np.linspace(-4, 4, 32, dtype="float32").reshape(4, 8)}
    np.testing.assert_allclose(fast.evaluate(inputs), g.evaluate(inputs), rtol=1e-5, atol=1e-6)
    assert fast.add("fast_sigmoid", [0]) == 1 and fast.add("sigmoid", [0]) == 3  # keyed by the new name


def test_queries():
    g = small_graph()
    assert g.op_counts() == {"var": 1, "constant": 1, "split": 1, "tuple_get_item": 2, "nn.relu": 1,
                             "multiply": 1, "tuple": 1}
    users = g.users()
    assert users[2] == [3, 4] and users[7] == []
    inputs = g.random_inputs(seed=1)
    assert inputs["x"].shape == (2, 6) and inputs["x"].dtype == np.float32
    np.testing.assert_array_equal(inputs["x"], g.random_inputs(seed=1)["x"])
    gi = TensorGraph()
    gi.var("idx", (3,), "int32")
    assert gi.random_inputs()["idx"].dtype == np.int32
    with pytest.raises(ValueError, match="no output"):
        TensorGraph().reachable()
    assert "split" in repr(g) and repr(g).endswith("return %7")


def test_attrs_are_immutable_hashable_values():
    a = Attrs({"axes": [1, 0], "k": np.int64(3), "eps": np.float32(0.5)})
    assert a["axes"] == (1, 0) and type(a["k"]) is int and type(a["eps"]) is float
    assert a == {"axes": (1, 0), "k": 3, "eps": 0.5}
    assert hash(a) == hash(Attrs(k=3, eps=0.5, axes=(1, 0)))
    b = a.replace(k=4)
    assert b["k"] == 4 and a["k"] == 3 and b != a
    assert len(a) == 3 and sorted(a) == ["axes", "eps", "k"]
    assert Attrs(nested={"x": [1]})["nested"] == Attrs(x=(1,))
    with pytest.raises(TypeError):
        Attrs(f=object())
    with pytest.raises(KeyError):
        a["missing"]


def test_attrs_pickled_into_another_process_hash_like_fresh_ones():
    """String hashes differ between processes: an unpickled Attrs must hash as one built there."""
    import pickle
    import subprocess
    import sys

    from relay_eqsat.types import Attrs

    a = Attrs(layout="NCHW", strides=(1, 1), axis=1)
    code = ("import pickle, sys\n"
            "from relay_eqsat.types import Attrs\n"
            "a = pickle.loads(sys.stdin.buffer.read())\n"
            "b = Attrs(layout='NCHW', strides=(1, 1), axis=1)\n"
            "assert a == b and hash(a) == hash(b) and len({a: 1, b: 2}) == 1, (hash(a), hash(b))\n")
    env = dict(__import__("os").environ, PYTHONHASHSEED="12345")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(a), env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert pickle.loads(pickle.dumps(a)) == a
