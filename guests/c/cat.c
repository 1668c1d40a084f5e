/* cat: prints the files named by its arguments; with -w PATH TEXT it
 * writes TEXT to PATH instead. Errors go to stderr and make the exit
 * status 1. The same as guests/cat, in C on wasi-libc. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
	if (argc == 4 && strcmp(argv[1], "-w") == 0) {
		FILE *f = fopen(argv[2], "w");
		if (!f || fputs(argv[3], f) == EOF || fclose(f) != 0) {
			fprintf(stderr, "cat: %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		return 0;
	}
	int status = 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "r");
		if (!f) {
			fprintf(stderr, "cat: %s: %s\n", argv[i], strerror(errno));
			status = 1;
			continue;
		}
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			fwrite(buf, 1, n, stdout);
		if (ferror(f)) {
			fprintf(stderr, "cat: %s: %s\n", argv[i], strerror(errno));
			status = 1;
		}
		fclose(f);
	}
	return status;
}
