/* Graphs, nodes and executables of the client (graph.c: capture, launch;
 * gnode.c: explicit construction).  See graph.c. */
#ifndef RGPU_CLIENT_GRAPH_H
#define RGPU_CLIENT_GRAPH_H

#include "client.h"

#define RC_GNODE 0x52636e64

struct rc_gnode;
struct rc_uobj;

/* references to a user object a graph or executable holds (uobj.c) */
struct rc_uref {
	struct rc_uobj *obj;
	unsigned count;
};

struct rc_graph {
	uint32_t magic;          /* RC_GRAPH or RC_GEXEC */
	struct rc_ctx *ctx;
	uint64_t h;
	uint64_t nhost;          /* host nodes, child graphs' included */
	uint8_t *coh;            /* words its kernels and copies name */
	size_t ncoh;
	uintptr_t *held;         /* registrations of host memory its copies name */
	size_t nheld;            /* (rc_graph_host), let go with the graph */
	struct rc_gnode **nodes; /* the nodes this process knows */
	size_t nnodes, capnodes;
	int owned;               /* a child graph or a conditional body */
	struct rc_gnode *owner;  /* a child graph handed out: its node */
	struct rc_uref *urefs;   /* user objects it holds */
	size_t nurefs;
};

struct rc_gnode {
	uint32_t magic;
	struct rc_graph *g;
	uint64_t h;
	CUgraphNodeType type;
	struct rc_gnode *orig;   /* in a clone: the node it copies */
	uint64_t hosts;          /* host nodes it adds to its graph */
	/* the parameters it was given (read back by the getters) */
	CUDA_KERNEL_NODE_PARAMS kp;
	void **kargs;            /* kp.kernelParams: pointers into kbuf */
	uint8_t *kbuf;
	CUDA_MEMSET_NODE_PARAMS ms;
	CUDA_MEMCPY3D mc;
	CUDA_HOST_NODE_PARAMS host;
	CUevent event;
	struct rc_graph *child;
	CUdeviceptr dptr;
	size_t bytes;
	struct rc_graph **bodies; /* conditional */
	unsigned nbodies;
	CUDA_BATCH_MEM_OP_NODE_PARAMS bm; /* paramArray: bmops */
	CUstreamBatchMemOpParams *bmops;
};

struct rc_graph *rc_graph_new(struct rc_ctx *c, uint64_t h);
void rc_graph_free(struct rc_graph *g);
/* dst (an executable or a clone) launches like src: host count, words,
 * and it holds src's registrations of host memory too */
int rc_graph_copy_info(struct rc_graph *dst, const struct rc_graph *src);
/* uobj.c: dst holds src's user objects too (-1: out of memory); g lets
 * go of its own (rc_graph_free does) */
int rc_uobj_copy(struct rc_graph *dst, const struct rc_graph *src);
void rc_uobj_drop(struct rc_graph *g);
/* words of n bytes go with g's launches (coherence) */
int rc_graph_coh_add(struct rc_graph *g, const void *words, size_t n);
/* g holds the registrations held[0..n) (one more holder each when ref) */
int rc_graph_hold(struct rc_graph *g, const uintptr_t *held, size_t n, int ref);

#endif
