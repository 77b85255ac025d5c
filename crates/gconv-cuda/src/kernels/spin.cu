// Keeps the GPU busy for `ns` nanoseconds. Timed work is enqueued behind it, so that by the
// time the start event runs, the work is already queued and the GPU never waits for the host:
// the events then hold GPU time only.
extern "C" __global__ void gconv_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
