/* idem-bench: being written (see doc/performance.md once it lands). */
#include <stdio.h>

int
main(void)
{
	fprintf(stderr, "idem-bench: not written yet\n");
	return 1;
}
