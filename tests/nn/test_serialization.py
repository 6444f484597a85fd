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
