"""vkml.nn.save / load: round trips, templates, and the errors for bad or mismatched files."""
import collections
import zipfile

import numpy as np
import pytest

import vkml.numpy as vnp
import vkml.random as vr
from vkml import nn
from vkml.nn import SerializationError, load, save, tree_paths
from vkml.tree_util import tree_leaves, tree_structure


def model(seed=0):
    k = vr.split(vr.key(seed))
    return nn.Sequential(nn.Conv2d(1, 2, 3, key=k[0]), nn.BatchNorm2d(2), nn.Flatten(),
                         nn.Linear(8, 3, key=k[1]))


def same_leaves(a, b):
    la, lb = tree_leaves(a), tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def test_model_round_trip(tmp_path):
    m = model(1)
    m.layers[1].running_mean = vnp.asarray([0.25, -1.0])
    p = tmp_path / "model.npz"
    save(p, m)
    flat = load(p)
    assert list(flat) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                          "layers.1.running_mean", "layers.1.running_var", "layers.3.weight",
                          "layers.3.bias"]
    assert np.asarray(flat["layers.1.running_mean"]).tolist() == [0.25, -1.0]
    back = load(p, like=model(2))
    assert type(back) is nn.Sequential and tree_structure(back) == tree_structure(m)
    same_leaves(back, m)
    x = vnp.ones((1, 1, 4, 4))
    m.eval(), back.eval()
    assert np.array_equal(np.asarray(m(x)), np.asarray(back(x)))
    fresh = model(3)
    fresh.load_state_dict(flat)                      # the flat dict is a state_dict
    same_leaves(fresh, m)


def test_nested_containers_dtypes_and_exact_path(tmp_path):
    Pair = collections.namedtuple("Pair", "left right")
    tree = {"w": vnp.asarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
            "steps": vnp.asarray(7), "flags": [vnp.asarray([True, False]), None],
            "pair": Pair(vnp.zeros((0, 2)), (vnp.ones(()),)), "n": 1.5}
    p = tmp_path / "ckpt.bin"                                  # no .npz suffix added
    save(p, tree)
    assert p.exists() and not (tmp_path / "ckpt.bin.npz").exists()
    assert sorted(load(p)) == ["flags.0", "n", "pair.left", "pair.right.0", "steps", "w"]
    back = load(p, like=tree)
    assert isinstance(back["pair"], Pair) and back["flags"][1] is None
    assert back["w"].dtype == np.float64 and back["steps"].dtype == np.int32
    assert back["flags"][0].dtype == np.bool_ and back["pair"].left.shape == (0, 2)
    assert float(back["n"]) == 1.5 and back["n"].dtype == np.float32
    same_leaves({k: v for k, v in back.items() if k != "n"}, {k: v for k, v in tree.items() if k != "n"})
    save(tmp_path / "leaf.npz", vnp.ones(3))
    assert list(load(tmp_path / "leaf.npz")) == ["<root>"]
    assert load(tmp_path / "leaf.npz", like=vnp.zeros(3)).shape == (3,)


def test_tree_paths_order_matches_flattening():
    tree = {"b": [1, {"z": 2, "a": 3}], "a": (4,)}
    assert tree_paths(tree) == [("a.0", 4), ("b.0", 1), ("b.1.a", 3), ("b.1.z", 2)]
    assert [v for _, v in tree_paths(tree)] == tree_leaves(tree)


def test_template_mismatches_name_the_key(tmp_path):
    p = tmp_path / "m.npz"
    save(p, model())
    with pytest.raises(SerializationError, match=r"missing keys \['layers.2.weight'.*unexpected keys "
                                                 r"\['layers.1.weight'"):
        load(p, like=nn.Sequential(nn.Conv2d(1, 2, 3), nn.Identity(), nn.Linear(8, 3)))
    wrong = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 4))
    with pytest.raises(SerializationError, match=r"key 'layers.3.weight' has shape \(3, 8\) float32 in "
                                                 r"the file but \(4, 8\) float32 in the template"):
        load(p, like=wrong)
    save(p, {"a": vnp.ones(2)})
    with pytest.raises(SerializationError, match=r"'a' has shape \(2,\) float32 .* \(2,\) float64"):
        load(p, like={"a": vnp.ones(2, np.float64)})


def test_bad_files_raise_clear_errors(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(SerializationError, match="not a readable .npz"):
        load(junk)
    good = tmp_path / "good.npz"
    save(good, {"a": vnp.ones(1000)})
    data = bytearray(good.read_bytes())
    data[200:260] = b"\xff" * 60                             # corrupt the stored array
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(SerializationError, match="corrupted|not a readable"):
        load(bad)
    truncated = tmp_path / "trunc.npz"
    truncated.write_bytes(good.read_bytes()[:300])
    with pytest.raises(SerializationError):
        load(truncated)
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(SerializationError, match="pickled .object. array; vkml never unpickles"):
        load(pickled)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(2))
    with pytest.raises(SerializationError, match="single .npy array"):
        load(single)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.npz")
    assert zipfile.is_zipfile(good)


def test_save_refuses_colliding_keys_and_non_arrays(tmp_path):
    with pytest.raises(SerializationError, match="share the key 'a.b'"):
        save(tmp_path / "x.npz", {"a.b": vnp.ones(1), "a": {"b": vnp.ones(1)}})
    with pytest.raises(SerializationError, match="leaf 'name' of type str is not an array"):
        save(tmp_path / "x.npz", {"name": "model"})
    assert not list(tmp_path.glob(".vkml-save-*"))            # no temporary file left behind
