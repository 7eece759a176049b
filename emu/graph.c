/* Explicit graphs on the emulated device: see below. */
