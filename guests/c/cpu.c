/* cpu: a CPU-bound loop for benchmarks: iterates a 64-bit mixing function
 * N times (first argument, default 100 million) and prints the result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	uint64_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 100000000ull;
	uint64_t x = 0x9e3779b97f4a7c15ull, acc = 0;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		acc += x & 0xff;
		if ((x & 0xffff) == 0)
			acc ^= i;
	}
	printf("%llu\n", (unsigned long long)acc);
	return 0;
}
