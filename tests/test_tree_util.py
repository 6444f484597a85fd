"""vkml.tree_util: flattening, and the leaf-type cache behind it."""
from vkml import tree_util


def test_a_type_registered_after_it_was_seen_as_a_leaf_becomes_a_node():
    class Late:
        def __init__(self, a, b):
            self.a, self.b = a, b
    x = Late(1, (2, 3))
    assert tree_util.tree_leaves([x, 4]) == [x, 4]          # a leaf, and remembered as one
    tree_util.register_pytree_node(Late, lambda p: ((p.a, p.b), None), lambda aux, c: Late(*c))
    assert tree_util.tree_leaves([x, 4]) == [1, 2, 3, 4]
    leaves, td = tree_util.tree_flatten({"k": x})
    y = tree_util.tree_unflatten(td, [10, 20, 30])["k"]
    assert (y.a, y.b) == (10, (20, 30))


def test_subclass_of_a_registered_base_is_a_node():
    class Base:
        def __init__(self, v):
            self.v = v
    tree_util.register_pytree_node(Base, lambda p: ((p.v,), None), lambda aux, c: Base(*c))

    class Child(Base):
        pass
    assert tree_util.tree_leaves([Child(5), 6.0, None, (7,)]) == [5, 6.0, 7]
