/*
 * sum, as a static C program: the tool of the per-call overhead benchmark (e2e/overhead_test.go).
 * Same contract and same answer as examples/tools/sum for integer arguments, but a program whose
 * own start is as short as a program's can be, so the benchmark measures the mesh, not a runtime's
 * start. It reads one JSON object on stdin and adds the integers of its first array; it is not a
 * JSON parser, and says so when the input has no array.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
	static char in[65536];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof in - 1 && (r = read(0, in + n, sizeof in - 1 - n)) > 0)
		n += (size_t)r;
	in[n] = 0;
	char *p = in;
	while (*p && *p != '[')
		p++;
	if (!*p) {
		puts("{\"ok\":false,\"error\":\"arguments need a numbers array\"}");
		return 1;
	}
	long long sum = 0;
	int count = 0;
	for (p++; *p && *p != ']';) {
		char *end;
		long long v = strtoll(p, &end, 10);
		if (end == p) {
			p++;
			continue;
		}
		sum += v;
		count++;
		p = end;
	}
	printf("{\"ok\":true,\"result\":{\"sum\":%lld,\"count\":%d}}\n", sum, count);
	return 0;
}
