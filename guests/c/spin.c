/* spin: never ends on its own. The same as guests/spin, in C. */
int main(void) {
	volatile unsigned long n = 0;
	for (;;)
		n++;
}
