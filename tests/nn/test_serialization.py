"""vkml.nn.save / load: round trips, templates, and the errors for bad or mismatched files."""
import collections
import zipfile

import numpy as np
import pytest

import vkml
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
    # torch's names: no `layers.` in a Sequential, BatchNorm's num_batches_tracked
    assert list(flat) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                          "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"]
    assert list(flat) == list(m.state_dict())
    assert np.asarray(flat["1.running_mean"]).tolist() == [0.25, -1.0]
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
    with pytest.raises(SerializationError, match=r"missing keys \['2.weight'.*unexpected keys "
                                                 r"\['1.weight'"):
        load(p, like=nn.Sequential(nn.Conv2d(1, 2, 3), nn.Identity(), nn.Linear(8, 3)))
    wrong = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 4))
    with pytest.raises(SerializationError, match=r"key '3.weight' has shape \(3, 8\) float32 in "
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


# --------------------------------------------------------------------------- hostile files


def _npy(a=None, header=None, data=None):
    """The bytes of an .npy member: a's, or a hand-written header and data."""
    import io
    buf = io.BytesIO()
    if a is not None:
        np.lib.format.write_array(buf, a, allow_pickle=False)
    else:
        np.lib.format.write_array_header_1_0(buf, header)
        buf.write(data)
    return buf.getvalue()


def _archive(path, members, compression=zipfile.ZIP_STORED):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # zipfile warns about duplicate names
        with zipfile.ZipFile(path, "w", compression) as zf:
            for name, data in members:
                zf.writestr(name, data)
    return path


def _never_opened(monkeypatch):
    """Make any decompression of a member fail the test: the checks come first."""
    def refuse(*a, **k):
        raise AssertionError("a member was opened before the archive was checked")
    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)


def test_zip_bomb_is_refused_before_anything_is_inflated(tmp_path, monkeypatch):
    from vkml.nn import serialization
    limit = 8 << 20     # stands for the device's largest tensor (2 GiB on lavapipe)
    monkeypatch.setattr(serialization, "_device_limit", lambda: limit)
    bomb = tmp_path / "bomb.npz"
    n = (limit + (1 << 20)) // 8
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("w.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
            zero = bytes(1 << 20)
            for _ in range(n * 8 // len(zero)):
                f.write(zero)
            f.write(bytes(n * 8 % len(zero)))
    assert bomb.stat().st_size < limit // 100        # small on disk, over the limit inflated
    _never_opened(monkeypatch)
    with pytest.raises(SerializationError, match=r"entry 'w' of .* inflates to .* MiB, more than this "
                                                 r"device's largest array"):
        load(bomb)


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_members_in_other_compression_methods_are_refused_unopened(tmp_path, monkeypatch, method):
    """bzip2 and lzma chunks inflate whole before zipfile truncates them to the declared
    size: a member lying about its size would inflate gigabytes first (review of issue 14)."""
    p = _archive(tmp_path / "b.npz", [("w.npy", _npy(np.zeros(100)))], method)
    _never_opened(monkeypatch)
    with pytest.raises(SerializationError, match=r"entry 'w' .* uses zip compression method .* stored "
                                                 r"or deflated members only"):
        load(p)


def test_archive_total_is_limited_by_max_bytes(tmp_path, monkeypatch):
    p = _archive(tmp_path / "two.npz", [("a.npy", _npy(np.zeros(100))), ("b.npy", _npy(np.zeros(100)))],
                 zipfile.ZIP_DEFLATED)
    assert sorted(load(p, max_bytes=None)) == ["a", "b"]
    _never_opened(monkeypatch)
    with pytest.raises(SerializationError, match=r"inflates to more than max_bytes=1000 bytes.*pass a "
                                                 r"larger max_bytes"):
        load(p, max_bytes=1000)


def test_pickled_members_are_never_unpickled(tmp_path):
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(tmp_path / "pwned"),))
    payload = pickle.dumps(np.array([Evil()], dtype=object))
    p = _archive(tmp_path / "evil.npz", [("a.npy", _npy(header={"descr": "|O", "fortran_order": False,
                                                                 "shape": (1,)}, data=payload))])
    with pytest.raises(SerializationError, match="'a' .* is a pickled .object. array; vkml never unpickles"):
        load(p)
    assert not (tmp_path / "pwned").exists()
    rec = _archive(tmp_path / "rec.npz", [("r.npy", _npy(header={"descr": [("x", "<f4"), ("o", "|O")],
                                                                  "fortran_order": False, "shape": (1,)},
                                                          data=payload))])
    with pytest.raises(SerializationError, match="'r' .* is a pickled .object. array"):
        load(rec)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["../evil.npy", "dir/a.npy", "/abs.npy", "readme.txt", "a\\b.npy", ".npy",
                                  "a\x01.npy"])
def test_member_names_outside_the_key_scheme_are_refused(tmp_path, name):
    p = _archive(tmp_path / "n.npz", [("ok.npy", _npy(np.ones(2))), (name, _npy(np.ones(2)))])
    with pytest.raises(SerializationError, match="outside the key scheme of vkml.nn.save"):
        load(p)


def test_duplicate_members_are_refused(tmp_path):
    p = _archive(tmp_path / "d.npz", [("a.npy", _npy(np.ones(2))), ("a.npy", _npy(np.zeros(3)))])
    with pytest.raises(SerializationError, match="two members named 'a.npy'"):
        load(p)


def test_headers_that_lie_about_their_shape_are_refused(tmp_path):
    huge = _archive(tmp_path / "h.npz", [("a.npy", _npy(header={"descr": "<f4", "fortran_order": False,
                                                                 "shape": (1 << 40, 1 << 20)}, data=bytes(16)))])
    with pytest.raises(SerializationError, match=r"'a' .* claims shape \(1099511627776, 1048576\) float32 "
                                                 r".*over the limit"):
        load(huge)
    short = _archive(tmp_path / "s.npz", [("a.npy", _npy(header={"descr": "<f8", "fortran_order": False,
                                                                  "shape": (10,)}, data=bytes(16)))])
    with pytest.raises(SerializationError, match=r"claims shape \(10,\) float64 \(80 bytes\) but holds 16 bytes"):
        load(short)
    garbage = _archive(tmp_path / "g.npz", [("a.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': os.system}")])
    with pytest.raises(SerializationError, match="'a' .* has no valid .npy header"):
        load(garbage)
    cplx = _archive(tmp_path / "c.npz", [("a.npy", _npy(np.ones(2, np.complex64)))])
    with pytest.raises(SerializationError, match="'a' .*complex64 is not supported on the device"):
        load(cplx)


def test_shapes_that_do_not_match_the_template_are_refused(tmp_path):
    p = _archive(tmp_path / "t.npz", [("w.npy", _npy(np.ones((2, 3), np.float32)))])
    with pytest.raises(SerializationError, match=r"key 'w' has shape \(2, 3\) float32 in the file but "
                                                 r"\(3, 2\) float32 in the template"):
        load(p, like={"w": vnp.zeros((3, 2))})


def test_big_endian_and_fortran_members_load_correctly(tmp_path):
    a = np.arange(6, dtype=">f8").reshape(2, 3)
    b = np.array([1, -2, 70000], dtype=">i4")
    c = np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3))
    p = _archive(tmp_path / "be.npz", [("a.npy", _npy(a)), ("b.npy", _npy(b)), ("c.npy", _npy(c))],
                 zipfile.ZIP_DEFLATED)
    got = load(p)
    assert got["a"].dtype == np.float64 and got["b"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got["a"]), a.astype("<f8"))
    np.testing.assert_array_equal(np.asarray(got["b"]), [1, -2, 70000])
    np.testing.assert_array_equal(np.asarray(got["c"]), c)
    back = load(p, like={"a": vnp.zeros((2, 3), np.float64), "b": vnp.zeros(3, np.int32), "c": vnp.zeros((2, 3))})
    np.testing.assert_array_equal(np.asarray(back["a"]), a)


# ------------------------------------------------------------------------------ torch's state dicts


def torch_style_state(m, seed=7):
    """What `{k: v.numpy() for k, v in torch_model.state_dict().items()}` gives for the same
    architecture: torch's key names, float32 arrays, an int64 num_batches_tracked."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in m.state_dict().items():
        if k.endswith("num_batches_tracked"):
            out[k] = np.asarray(5, np.int64)
        elif k.endswith("running_var"):
            out[k] = rng.random(v.shape).astype(np.float32) + 0.5
        else:
            out[k] = rng.standard_normal(v.shape).astype(np.float32)
    return out


class Net(nn.Module):
    def __init__(self):
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        self.norm = nn.BatchNorm2d(2)
        self.heads = [nn.Linear(2, 1), nn.Linear(2, 1)]


def test_state_dict_keys_are_torchs():
    assert list(model().state_dict()) == [
        "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
        "1.num_batches_tracked", "3.weight", "3.bias"]
    assert list(Net().state_dict()) == [
        "encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias",
        "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var",
        "norm.num_batches_tracked", "heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"]
    assert [n for n, _ in Net().named_modules()][:3] == ["", "encoder", "encoder.0"]
    assert [n for n, _ in model().named_children()] == ["0", "1", "2", "3"]


def test_num_batches_tracked_counts_train_mode_calls():
    m = model()
    bn = m.layers[1]
    x = vnp.asarray(np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32))
    assert float(bn.num_batches_tracked) == 0
    m(x), m(x)
    assert float(bn.num_batches_tracked) == 2
    m.eval()(x)
    assert float(bn.num_batches_tracked) == 2
    # under jit the module the function returns carries the count
    step = vkml.jit(lambda m, x: (m(x), m)[1])
    m.train()
    m2 = step(m, x)
    assert float(m2.layers[1].num_batches_tracked) == 3 and float(bn.num_batches_tracked) == 2
    assert nn.BatchNorm2d(2, track_running_stats=False).state_dict().keys() == {"weight", "bias"}


def test_a_torch_state_dict_converted_to_numpy_loads():
    m = model()
    sd = torch_style_state(m)
    assert m.load_state_dict(sd) == ([], [])
    got = m.state_dict()
    for k, v in sd.items():
        assert got[k].shape == v.shape
        np.testing.assert_array_equal(np.asarray(got[k]), v.astype(np.float32), err_msg=k)
    assert isinstance(m.layers[0].weight, vkml.Tensor) and m.layers[0].weight.requires_grad
    # float64 values are cast to the model's float32, as torch's copy_ does
    sd64 = {k: v.astype(np.float64) for k, v in sd.items()}
    m.load_state_dict(sd64)
    assert m.layers[3].weight.dtype == np.float32
    # an old checkpoint without num_batches_tracked loads (torch allows it too)
    old = {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    assert model().load_state_dict(old) == ([], [])


def test_load_state_dict_errors_as_torchs():
    m = model()
    sd = torch_style_state(m)
    del sd["0.bias"], sd["3.weight"]
    sd["extra.weight"] = np.zeros(2, np.float32)
    msg = ('Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: "0.bias", '
           '"3.weight". \n\tUnexpected key(s) in state_dict: "extra.weight". ')
    before = np.asarray(m.layers[0].weight)
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd)
    assert str(e.value) == msg and isinstance(e.value, ValueError)
    assert np.array_equal(before, np.asarray(m.layers[0].weight))        # nothing was loaded
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["0.bias", "3.weight"] and res.unexpected_keys == ["extra.weight"]
    np.testing.assert_array_equal(np.asarray(m.layers[0].weight), sd["0.weight"])
    # a shape mismatch is an error even when not strict, as in torch
    sd = torch_style_state(m)
    sd["3.weight"] = np.zeros((4, 8), np.float32)
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=r"size mismatch for 3.weight: copying a param with shape "
                                               r"\(4, 8\) from checkpoint, the shape in current model "
                                               r"is \(3, 8\)\."):
            m.load_state_dict(sd, strict=strict)

    class Counter(nn.Module):
        _buffers = ("steps",)

        def __init__(self):
            self.steps = vnp.asarray(3)
    with pytest.raises(RuntimeError, match="dtype mismatch for steps: .* float32"):
        Counter().load_state_dict({"steps": np.float32(2.5)})
    c = Counter()
    c.load_state_dict({"steps": np.int64(9)})
    assert c.steps.dtype == np.int32 and int(c.steps) == 9
