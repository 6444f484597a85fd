"""cProfile of jitted calls (the host side of a call): the MLP step and the chain."""
import cProfile
import io
import pstats
import sys

from prof_kernels import mlp_step   # same folder


def prof(name, f, n=10):
    f(); f()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        f()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("=====", name)
    print(s.getvalue()[:3500])


def mlp_run(batch, dims):
    j, (p, s, x, y) = mlp_step(batch, dims, donate=True)
    st = {"p": p, "s": s}

    def run():
        st["p"], st["s"], loss = j(st["p"], st["s"], x, y)
        return loss
    return run

if __name__ == "__main__":
    big = len(sys.argv) > 1 and sys.argv[1] == "big"
    prof("mlp", mlp_run(4096, (1024, 4096, 4096, 10)) if big else mlp_run(256, (64, 256, 256, 10)))
