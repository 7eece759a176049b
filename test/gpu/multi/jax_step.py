#!/usr/bin/env python3
"""A jitted JAX training step (an MLP on fixed data, 20 SGD steps): prints
LOSS lines and a RESULT digest of the final parameters.  Run directly and
through rgpu by test/gpu/multi-gpu.sh, which compares the two."""
import hashlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

print("INFO jax", jax.__version__, "devices", jax.devices(), flush=True)
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal((1024, 256)), jnp.float32)
y = jnp.asarray(rng.standard_normal((1024, 10)), jnp.float32)
params = [jnp.asarray(rng.standard_normal(s) * 0.05, jnp.float32)
          for s in [(256, 512), (512,), (512, 10), (10,)]]


def loss(p, x, y):
    h = jnp.tanh(x @ p[0] + p[1])
    return jnp.mean((h @ p[2] + p[3] - y) ** 2)


@jax.jit
def step(p, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    return [a - 0.05 * b for a, b in zip(p, g)], l


t0 = time.time()
for i in range(20):
    params, l = step(params, x, y)
    print(f"LOSS {i} {float(l):.7f}", flush=True)
h = hashlib.sha256(b"".join(np.asarray(p).tobytes() for p in params)).hexdigest()[:16]
print(f"RESULT jax_params {h}")
print(f"INFO jax 20 steps in {time.time() - t0:.2f} s")
