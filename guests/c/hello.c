/* hello: greets its arguments on stdout (joined by spaces, "world"
 * without any) and says goodbye on stderr; the same as guests/hello, in
 * C on wasi-libc: a module of kilobytes, compiled in a moment. */
#include <stdio.h>

int main(int argc, char **argv) {
	printf("hello, ");
	if (argc < 2)
		printf("world");
	for (int i = 1; i < argc; i++)
		printf(i > 1 ? " %s" : "%s", argv[i]);
	printf("\n");
	fprintf(stderr, "goodbye\n");
	return 0;
}
