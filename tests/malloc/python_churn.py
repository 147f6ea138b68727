"""A Python workload for the malloc face test: dict, list, str and json churn.

Prints one checksum that depends only on the computation, so a run under
LD_PRELOAD=libunipool_malloc.so must print the same line as a run without.
Threads interleave their allocations (the GIL still switches between them).
"""
import hashlib
import json
import random
import sys
import threading


def churn(seed: int, rounds: int) -> str:
    rng = random.Random(seed)
    digest = hashlib.sha256()
    live = {}
    for i in range(rounds):
        key = f"k{rng.randrange(1000)}"
        if key in live and rng.random() < 0.4:
            del live[key]
        else:
            live[key] = {
                "id": i,
                "tokens": [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 64))],
                "text": "x" * rng.randrange(0, 2048),
                "nested": {"a": [rng.random() for _ in range(8)], "b": str(i) * rng.randrange(1, 20)},
            }
        if i % 1000 == 0:
            blob = json.dumps(live, sort_keys=True)
            back = json.loads(blob)
            digest.update(hashlib.sha256(json.dumps(back, sort_keys=True).encode()).digest())
            big = bytearray(rng.randrange(1 << 16, 1 << 21))  # large blocks too
            big[-1] = i & 0xFF
            digest.update(bytes(big[-16:]))
    digest.update(json.dumps(sorted(live.items()), sort_keys=True).encode())
    return digest.hexdigest()


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    results = [None] * 4

    def worker(i: int) -> None:
        results[i] = churn(1000 + i, rounds)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(hashlib.sha256("".join(results).encode()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
