"""CUDA graphs on CPU, for the timing's logic: capture records what the runners would launch (thunks), a replay
runs them. Runners ask `CAPTURE.active` as a kernel's launcher asks cudaStreamIsCapturing; work a runner puts
"on another stream" waits in PENDING until the (patched) device-wide synchronization."""
import time

from tests.evaluator import runners

PENDING: list = []


class Capture:
    def __init__(self):
        self.active, self.recorded = False, []

    def __call__(self, fn, order):
        fn(order[0])  # warm-up outside capture, as timing.capture does
        self.active, self.recorded = True, []
        for i in order:
            assert fn(i) == 0
        self.active = False
        return list(self.recorded)

    def record(self, thunk) -> int:
        self.recorded.append(thunk)
        return 0


CAPTURE = Capture()


def replay(graph, then=None):
    start = time.perf_counter()
    for thunk in graph:
        thunk()
    us = (time.perf_counter() - start) * 1e6
    return us, then() if then else None


def drain(*_a, **_k):
    """torch.cuda.synchronize on CPU: the work left on other streams finishes."""
    while PENDING:
        PENDING.pop(0)()


def graphed(compute):
    """A runner that launches `compute` into the graph while captured, and runs it otherwise (honest)."""
    def launch(args):
        if CAPTURE.active:
            return CAPTURE.record(lambda: compute(args))
        return compute(args)
    return launch


def capture_noop(args):
    return 0 if CAPTURE.active else runners.silu(args)


def capture_time_result(args):
    """Computes at capture time and replays a copy of that result."""
    if not CAPTURE.active:
        return runners.silu(args)
    runners.silu(args)
    result = args.tensors[1].clone()
    return CAPTURE.record(lambda: args.tensors[1].copy_(result))


def batches_of(k):
    """Records one launch per k calls that does the k calls' work: the last calls wait for a k-th that never
    comes, unless the count is a multiple of k."""
    pending = []

    def launch(args):
        if not CAPTURE.active:
            return runners.silu(args)
        pending.append(args)
        if len(pending) == k:
            batch = list(pending)
            pending.clear()
            CAPTURE.record(lambda: [runners.silu(a) for a in batch])
        return 0
    return launch


def pointer_cache():
    """While captured, a result per output pointer: computed at the first replay, copied afterwards."""
    cache = {}

    def work(args):
        key = args.tensors[1].data_ptr()
        if key in cache:
            args.tensors[1].copy_(cache[key])
            return 0
        runners.silu(args)
        cache[key] = args.tensors[1].clone()
        return 0
    return graphed(work)


def background(args):
    """Leaves its (right) work on another stream: done by the next device-wide synchronization."""
    if CAPTURE.active:
        return CAPTURE.record(lambda: PENDING.append(lambda: runners.silu(args)))
    return runners.silu(args)
