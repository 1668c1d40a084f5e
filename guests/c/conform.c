/* conform: the program the executor conformance suite
 * (internal/executor/executortest) runs at S2. With "print" it copies
 * its stdin to stdout, writes "err" to stderr and exits 3; with "hang"
 * it writes "ready" and then runs until it is stopped; with "open PATH"
 * it tries to read PATH, says whether it could, and exits 0. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
	if (argc >= 2 && strcmp(argv[1], "print") == 0) {
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
			fwrite(buf, 1, n, stdout);
		fprintf(stderr, "err\n");
		return 3;
	}
	if (argc >= 2 && strcmp(argv[1], "hang") == 0) {
		printf("ready\n");
		fflush(stdout);
		volatile unsigned long i = 0;
		for (;;)
			i++;
	}
	if (argc == 3 && strcmp(argv[1], "open") == 0) {
		FILE *f = fopen(argv[2], "r");
		puts(f ? "read" : "refused");
		return 0;
	}
	fprintf(stderr, "conform: want print, hang or open PATH\n");
	return 2;
}
