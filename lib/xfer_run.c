/* The one chunk-pipelining loop (see xfer.h). */
#include "xfer.h"

static void give_back(const struct xfer_steps *s, void *arg, struct xfer_chunk *c)
{
	if (s->abandon)
		s->abandon(arg, c);
}

int xfer_run(uint64_t total, size_t chunk, int lookahead, const struct xfer_steps *s,
	     void *arg, int *queued)
{
	struct xfer_chunk cur = { .buf = -1 }, prev = { .buf = -1 };
	int have_prev = 0, rc = 0;
	uint64_t off = 0;
	*queued = 0;
	if (!chunk)
		return 0;
	while (off < total || have_prev) {
		int have_cur = 0;
		if (off < total) {
			cur = (struct xfer_chunk){ .off = off, .buf = -1 };
			cur.len = total - off < chunk ? (size_t)(total - off) : chunk;
			rc = s->stage(arg, &cur);
			*queued |= cur.queued;
			if (rc) {
				give_back(s, arg, &cur);
				break;
			}
			off += cur.len;
			have_cur = 1;
		}
		if (!lookahead) {
			/* each chunk goes as soon as it is staged */
			if ((rc = s->emit(arg, &cur, off == total))) {
				give_back(s, arg, &cur);
				return rc;
			}
			continue;
		}
		/* chunk k+1 is staged (its GPU work queued) before chunk k is
		 * handed on: the GPU and the wire overlap */
		if (have_prev && (rc = s->emit(arg, &prev, !have_cur))) {
			give_back(s, arg, &prev);
			if (have_cur)
				give_back(s, arg, &cur);
			return rc;
		}
		prev = cur;
		have_prev = have_cur;
	}
	if (rc && have_prev)
		give_back(s, arg, &prev);
	return rc;
}
