#include "memconn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int mc_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	struct memconn *m = (struct memconn *)c;
	for (int i = 0; i < n; i++) {
		m->sent += iov[i].iov_len;
		if (!m->keep_out || !iov[i].iov_len)
			continue;
		if (m->out_len + iov[i].iov_len > m->out_cap) {
			size_t cap = m->out_cap ? m->out_cap : 4096;
			while (cap < m->out_len + iov[i].iov_len)
				cap *= 2;
			uint8_t *p = realloc(m->out, cap);
			if (!p) {
				errno = ENOMEM;
				return -1;
			}
			m->out = p;
			m->out_cap = cap;
		}
		memcpy(m->out + m->out_len, iov[i].iov_base, iov[i].iov_len);
		m->out_len += iov[i].iov_len;
	}
	return 0;
}

static ssize_t mc_recv_some(struct rgpu_conn *c, void *buf, size_t n)
{
	struct memconn *m = (struct memconn *)c;
	size_t left = m->in_len - m->in_off;
	if (!left) {
		errno = 0; /* orderly EOF */
		return 0;
	}
	size_t k = n < left ? n : left;
	memcpy(buf, m->in + m->in_off, k);
	m->in_off += k;
	return (ssize_t)k;
}

static int mc_recv(struct rgpu_conn *c, void *buf, size_t n)
{
	struct memconn *m = (struct memconn *)c;
	if (m->in_len - m->in_off < n) {
		m->in_off = m->in_len;
		errno = 0;
		return -1;
	}
	memcpy(buf, m->in + m->in_off, n);
	m->in_off += n;
	return 0;
}

static void mc_shutdown(struct rgpu_conn *c)
{
	struct memconn *m = (struct memconn *)c;
	m->in_off = m->in_len;
}

static void mc_close(struct rgpu_conn *c) { (void)c; }

static const struct rgpu_transport memconn_tp = {
	.name = "memory",
	.sendv = mc_sendv,
	.recv = mc_recv,
	.recv_some = mc_recv_some,
	.shutdown = mc_shutdown,
	.close = mc_close,
};

void memconn_init(struct memconn *m, const void *in, size_t len, int keep_out)
{
	memset(m, 0, sizeof(*m));
	m->c.tp = &memconn_tp;
	strcpy(m->c.peer, "fuzz");
	m->in = in;
	m->in_len = len;
	m->keep_out = keep_out;
}

void memconn_fini(struct memconn *m)
{
	free(m->out);
	m->out = NULL;
}
