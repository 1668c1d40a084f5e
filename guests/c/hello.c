/* hello: greets its first argument, in C on wasi-libc. */
#include <stdio.h>

int main(int argc, char **argv) {
	printf("hello from C, %s\n", argc > 1 ? argv[1] : "world");
	return 0;
}
