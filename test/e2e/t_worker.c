/*
 * Session worker request handling over the raw protocol (issue 15):
 *
 *  deferred_<op>:  after a failing no-reply memset, MEM_ALLOC, STREAM_CREATE
 *                  and MODULE_LOAD still succeed and return their resource
 *                  (the error stays pending and a CTX_SYNC reports it);
 *                  the memory is usable and freeable.
 *  stale_function: after MODULE_UNLOAD (LIBRARY_UNLOAD) the module's
 *                  functions (the library's kernels and functions) are
 *                  refused with CUDA_ERROR_INVALID_HANDLE; the session keeps
 *                  serving.
 *  sync_overtaken: STREAM_SYNC / CTX_SYNC / EVENT_SYNC on a long kernel,
 *                  pipelined with MEM_GET_INFO and STREAM_QUERY: those two
 *                  are answered while the sync still waits; the sync is
 *                  answered once the kernel is done.
 *  printf_200k:    200 KB of device printf between two synchronisations
 *                  arrive intact, as OUTPUT frames ahead of the sync reply.
 *  bad_images:     truncated or inconsistent module images are refused with
 *                  CUDA_ERROR_INVALID_IMAGE; the session keeps serving.
 *
 * usage: t_worker HOST PORT
 */
#include "raw.h"
#include "test_kernels.h"

#include <cuda.h> /* CUresult values only: this program speaks the protocol */

#include <elf.h>
#include <time.h>

/* test_kernels.cu as a fatbin (test/Makefile.am) */
extern const unsigned char test_kernels_fatbin[];
extern const size_t test_kernels_fatbin_size;

static const char *host;
static unsigned port;
static int failures;

#define FAILF(...) do { fprintf(stderr, "t_worker: FAIL: " __VA_ARGS__); fputc('\n', stderr); failures++; } while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A request's fields, built one call at a time. */
static struct wbuf W;
static struct raw_reply RP;

static void begin(void) { wbuf_reset(&W); }

static int32_t call(struct raw *c, uint16_t op) { return raw_call(c, op, &W, &RP); }

static uint64_t alloc(struct raw *c, uint64_t ctx, uint64_t size, int32_t *st)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, size);
	*st = call(c, RGPU_OP_MEM_ALLOC);
	return *st == 0 ? get_u64(&RP.r) : 0;
}

static int32_t mem_free(struct raw *c, uint64_t ctx, uint64_t p)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, p);
	return call(c, RGPU_OP_MEM_FREE);
}

static int32_t ctx_sync(struct raw *c, uint64_t ctx)
{
	begin();
	put_u64(&W, ctx);
	return call(c, RGPU_OP_CTX_SYNC);
}

/* A no-reply memset that fails (no such address): CUDA_ERROR_INVALID_VALUE
 * is deferred. */
static void failing_memset(struct raw *c, uint64_t ctx)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, 0);            /* NULL stream */
	put_u64(&W, 0x10);         /* dst: nothing there */
	put_u32(&W, 0);
	put_u32(&W, 1);
	put_u64(&W, 16);
	put_u32(&W, 0);
	raw_send(c, RGPU_OP_MEMSET, RGPU_F_NOREPLY, &W);
}

static uint64_t module_load(struct raw *c, uint64_t ctx, const void *img, size_t n, int32_t *st)
{
	begin();
	put_u64(&W, ctx);
	put_u32(&W, RGPU_IMAGE_FATBIN);
	put_bytes(&W, img, n);
	*st = call(c, RGPU_OP_MODULE_LOAD);
	return *st == 0 ? get_u64(&RP.r) : 0;
}

static uint64_t get_function(struct raw *c, uint64_t ctx, uint64_t mod, const char *name, int32_t *st)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, mod);
	put_str(&W, name);
	*st = call(c, RGPU_OP_MODULE_GET_FUNCTION);
	return *st == 0 ? get_u64(&RP.r) : 0;
}

static void put_launch(uint64_t ctx, uint64_t f, unsigned grid, unsigned block, uint64_t stream,
		       const void *params, size_t plen)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, f);
	put_u32(&W, grid);
	put_u32(&W, 1);
	put_u32(&W, 1);
	put_u32(&W, block);
	put_u32(&W, 1);
	put_u32(&W, 1);
	put_u32(&W, 0);
	put_u64(&W, stream);
	put_bytes(&W, params, plen);
}

static int32_t func_attrs(struct raw *c, uint64_t ctx, uint64_t f)
{
	begin();
	put_u64(&W, ctx);
	put_u64(&W, f);
	return call(c, RGPU_OP_FUNC_GET_ATTRS);
}

static void test_deferred(void)
{
	struct raw c;
	uint64_t ctx;
	int32_t st;
	if (raw_session(&c, host, port, &ctx) < 0) {
		FAILF("deferred: no session");
		return;
	}
	/* MEM_ALLOC, three times 256 MiB as in the report */
	uint64_t p[3];
	for (int i = 0; i < 3; i++) {
		failing_memset(&c, ctx);
		p[i] = alloc(&c, ctx, 256u << 20, &st);
		if (st != 0 || !p[i])
			FAILF("deferred_mem_alloc: MEM_ALLOC after a failed no-reply memset: status %d", st);
		st = ctx_sync(&c, ctx);
		if (st != CUDA_ERROR_INVALID_VALUE)
			FAILF("deferred_mem_alloc: CTX_SYNC gave %d, want the memset's %d", st,
			      CUDA_ERROR_INVALID_VALUE);
	}
	for (int i = 0; i < 3; i++)
		if (p[i] && (st = mem_free(&c, ctx, p[i])) != 0)
			FAILF("deferred_mem_alloc: MEM_FREE of the allocation: %d", st);

	/* STREAM_CREATE */
	failing_memset(&c, ctx);
	begin();
	put_u64(&W, ctx);
	put_u32(&W, 0);
	put_i32(&W, 0);
	st = call(&c, RGPU_OP_STREAM_CREATE);
	uint64_t stream = st == 0 ? get_u64(&RP.r) : 0;
	if (st != 0 || !stream)
		FAILF("deferred_stream_create: STREAM_CREATE after a failed no-reply memset: %d", st);
	if ((st = ctx_sync(&c, ctx)) != CUDA_ERROR_INVALID_VALUE)
		FAILF("deferred_stream_create: CTX_SYNC gave %d, want %d", st, CUDA_ERROR_INVALID_VALUE);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, stream);
	if (stream && (st = call(&c, RGPU_OP_STREAM_DESTROY)) != 0)
		FAILF("deferred_stream_create: STREAM_DESTROY of the stream: %d", st);

	/* MODULE_LOAD */
	failing_memset(&c, ctx);
	uint64_t mod = module_load(&c, ctx, test_kernels_fatbin, test_kernels_fatbin_size, &st);
	if (st != 0 || !mod)
		FAILF("deferred_module_load: MODULE_LOAD after a failed no-reply memset: %d", st);
	if ((st = ctx_sync(&c, ctx)) != CUDA_ERROR_INVALID_VALUE)
		FAILF("deferred_module_load: CTX_SYNC gave %d, want %d", st, CUDA_ERROR_INVALID_VALUE);
	if (mod) {
		get_function(&c, ctx, mod, "vec_add", &st);
		if (st != 0)
			FAILF("deferred_module_load: the module is not usable: %d", st);
	}
	/* and nothing is left pending */
	if ((st = ctx_sync(&c, ctx)) != 0)
		FAILF("deferred: a second CTX_SYNC gave %d", st);
	close(c.fd);
}

static void test_stale_function(void)
{
	struct raw c;
	uint64_t ctx;
	int32_t st;
	if (raw_session(&c, host, port, &ctx) < 0) {
		FAILF("stale_function: no session");
		return;
	}
	uint64_t mod = module_load(&c, ctx, test_kernels_fatbin, test_kernels_fatbin_size, &st);
	uint64_t f = mod ? get_function(&c, ctx, mod, "inc_i32", &st) : 0;
	if (!f) {
		FAILF("stale_function: no function (%d)", st);
		close(c.fd);
		return;
	}
	/* the module's function names, before and after it goes */
	begin();
	put_u64(&W, ctx);
	put_u64(&W, mod);
	st = call(&c, RGPU_OP_MODULE_FUNCTIONS);
	uint32_t nf = st == 0 ? get_u32(&RP.r) : 0;
	int found = 0;
	for (uint32_t i = 0; i < nf && rd_ok(&RP.r); i++) {
		const char *nm = get_str(&RP.r, 4096);
		found += nm && !strcmp(nm, "inc_i32");
	}
	if (st != CUDA_ERROR_NOT_SUPPORTED && (st != 0 || nf != TEST_KERNELS_N || found != 1))
		FAILF("stale_function: MODULE_FUNCTIONS: %d, %u names, inc_i32 %d times", st, nf, found);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, mod);
	if ((st = call(&c, RGPU_OP_MODULE_UNLOAD)) != 0)
		FAILF("stale_function: MODULE_UNLOAD: %d", st);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, mod);
	if ((st = call(&c, RGPU_OP_MODULE_FUNCTIONS)) != CUDA_ERROR_INVALID_HANDLE)
		FAILF("stale_function: MODULE_FUNCTIONS of an unloaded module gave %d, want %d", st,
		      CUDA_ERROR_INVALID_HANDLE);
	uint8_t params[12] = { 0 };
	put_launch(ctx, f, 1, 1, 0, params, sizeof(params));
	if ((st = call(&c, RGPU_OP_LAUNCH)) != CUDA_ERROR_INVALID_HANDLE)
		FAILF("stale_function: LAUNCH of a function of an unloaded module gave %d, want %d", st,
		      CUDA_ERROR_INVALID_HANDLE);
	if ((st = func_attrs(&c, ctx, f)) != CUDA_ERROR_INVALID_HANDLE)
		FAILF("stale_function: FUNC_GET_ATTRS gave %d, want %d", st, CUDA_ERROR_INVALID_HANDLE);

	/* a library's kernels and their functions */
	begin();
	put_u64(&W, ctx);
	put_u32(&W, RGPU_IMAGE_FATBIN);
	put_bytes(&W, test_kernels_fatbin, test_kernels_fatbin_size);
	st = call(&c, RGPU_OP_LIBRARY_LOAD);
	uint64_t lib = st == 0 ? get_u64(&RP.r) : 0;
	begin();
	put_u64(&W, lib);
	put_str(&W, "inc_i32");
	st = call(&c, RGPU_OP_LIBRARY_GET_KERNEL);
	uint64_t k = st == 0 ? get_u64(&RP.r) : 0;
	begin();
	put_u64(&W, ctx);
	put_u64(&W, k);
	st = call(&c, RGPU_OP_KERNEL_GET_FUNCTION);
	uint64_t kf = st == 0 ? get_u64(&RP.r) : 0;
	if (!lib || !k || !kf)
		FAILF("stale_function: library path: %d", st);
	begin();
	put_u64(&W, lib);
	if ((st = call(&c, RGPU_OP_LIBRARY_UNLOAD)) != 0)
		FAILF("stale_function: LIBRARY_UNLOAD: %d", st);
	if ((st = func_attrs(&c, ctx, kf)) != CUDA_ERROR_INVALID_HANDLE)
		FAILF("stale_function: function of an unloaded library gave %d, want %d", st,
		      CUDA_ERROR_INVALID_HANDLE);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, k);
	if ((st = call(&c, RGPU_OP_KERNEL_GET_FUNCTION)) != CUDA_ERROR_INVALID_HANDLE)
		FAILF("stale_function: kernel of an unloaded library gave %d, want %d", st,
		      CUDA_ERROR_INVALID_HANDLE);
	/* still serving */
	begin();
	put_u64(&W, ctx);
	if ((st = call(&c, RGPU_OP_MEM_GET_INFO)) != 0)
		FAILF("stale_function: MEM_GET_INFO afterwards: %d", st);
	close(c.fd);
}

/* op waits on a 1.5 s kernel; MEM_GET_INFO and STREAM_QUERY sent right
 * behind it must be answered first, and quickly. */
static void sync_case(const char *what, uint16_t op)
{
	struct raw c;
	uint64_t ctx;
	int32_t st;
	if (raw_session(&c, host, port, &ctx) < 0) {
		FAILF("%s: no session", what);
		return;
	}
	uint64_t mod = module_load(&c, ctx, test_kernels_fatbin, test_kernels_fatbin_size, &st);
	uint64_t f = mod ? get_function(&c, ctx, mod, "busy_wait_ns", &st) : 0;
	begin();
	put_u64(&W, ctx);
	put_u32(&W, 0);
	put_i32(&W, 0);
	st = call(&c, RGPU_OP_STREAM_CREATE);
	uint64_t stream = st == 0 ? get_u64(&RP.r) : 0;
	begin();
	put_u64(&W, ctx);
	put_u32(&W, 0);
	st = call(&c, RGPU_OP_EVENT_CREATE);
	uint64_t ev = st == 0 ? get_u64(&RP.r) : 0;
	if (!f || !stream || !ev) {
		FAILF("%s: setup: %d", what, st);
		close(c.fd);
		return;
	}
	const double kernel_s = 1.5;
	uint64_t ns = (uint64_t)(kernel_s * 1e9);
	put_launch(ctx, f, 1, 1, stream, &ns, sizeof(ns));
	raw_send(&c, RGPU_OP_LAUNCH, RGPU_F_NOREPLY, &W);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, ev);
	put_u64(&W, stream);
	raw_send(&c, RGPU_OP_EVENT_RECORD, RGPU_F_NOREPLY, &W);

	double t0 = now_s();
	begin();
	put_u64(&W, ctx);
	if (op != RGPU_OP_CTX_SYNC)
		put_u64(&W, op == RGPU_OP_EVENT_SYNC ? ev : stream);
	uint64_t id_sync = raw_send(&c, op, 0, &W);
	begin();
	put_u64(&W, ctx);
	uint64_t id_info = raw_send(&c, RGPU_OP_MEM_GET_INFO, 0, &W);
	begin();
	put_u64(&W, ctx);
	put_u64(&W, stream);
	uint64_t id_query = raw_send(&c, RGPU_OP_STREAM_QUERY, 0, &W);

	int got_info = 0, got_query = 0, got_sync = 0;
	double t_info = 0, t_sync = 0;
	for (int i = 0; i < 3; i++) {
		if (raw_recv(&c, &RP, 20000) < 0) {
			FAILF("%s: reply %d of 3 missing", what, i + 1);
			break;
		}
		if (RP.h.id == id_info) {
			got_info = 1;
			t_info = now_s() - t0;
			if (got_sync)
				FAILF("%s: MEM_GET_INFO answered after the sync", what);
			if (RP.status != 0)
				FAILF("%s: MEM_GET_INFO status %d", what, RP.status);
		} else if (RP.h.id == id_query) {
			got_query = 1;
			if (got_sync)
				FAILF("%s: STREAM_QUERY answered after the sync", what);
			if (RP.status != CUDA_ERROR_NOT_READY)
				FAILF("%s: STREAM_QUERY during the kernel gave %d, want NOT_READY", what,
				      RP.status);
		} else if (RP.h.id == id_sync) {
			got_sync = 1;
			t_sync = now_s() - t0;
			if (RP.status != 0)
				FAILF("%s: sync status %d", what, RP.status);
		} else {
			FAILF("%s: reply to an unknown id %llu", what, (unsigned long long)RP.h.id);
		}
	}
	if (got_info && t_info > kernel_s / 2)
		FAILF("%s: MEM_GET_INFO took %.2f s behind the sync", what, t_info);
	if (got_sync && t_sync < kernel_s * 0.9)
		FAILF("%s: the sync returned after %.2f s, before the %.1f s kernel ended", what,
		      t_sync, kernel_s);
	if (got_info && got_query && got_sync)
		printf("t_worker: %s: MEM_GET_INFO after %.3f s, sync after %.3f s\n", what, t_info, t_sync);
	/* destroying the stream and event waits for nothing left; still fine */
	begin();
	put_u64(&W, ctx);
	put_u64(&W, stream);
	if ((st = call(&c, RGPU_OP_STREAM_DESTROY)) != 0)
		FAILF("%s: STREAM_DESTROY: %d", what, st);
	close(c.fd);
}

static void test_printf(void)
{
	struct raw c;
	uint64_t ctx;
	int32_t st;
	if (raw_session(&c, host, port, &ctx) < 0) {
		FAILF("printf_200k: no session");
		return;
	}
	uint64_t mod = module_load(&c, ctx, test_kernels_fatbin, test_kernels_fatbin_size, &st);
	uint64_t f = mod ? get_function(&c, ctx, mod, "print_lines", &st) : 0;
	if (!f) {
		FAILF("printf_200k: no print_lines (%d)", st);
		close(c.fd);
		return;
	}
	const int lines = 3200; /* 66 bytes each: 211,200 bytes */
	const size_t linelen = 66;
	int32_t n = lines;
	put_launch(ctx, f, (lines + 127) / 128, 128, 0, &n, sizeof(n));
	raw_send(&c, RGPU_OP_LAUNCH, RGPU_F_NOREPLY, &W);
	begin();
	put_u64(&W, ctx);
	uint64_t id = raw_send(&c, RGPU_OP_CTX_SYNC, 0, &W);
	size_t cap = lines * linelen + 1, len = 0;
	char *out = calloc(1, cap + (1 << 20));
	for (;;) {
		if (raw_recv(&c, &RP, 20000) < 0) {
			FAILF("printf_200k: no reply to CTX_SYNC");
			break;
		}
		if (RP.h.id != id) {
			FAILF("printf_200k: frame for id %llu", (unsigned long long)RP.h.id);
			break;
		}
		if (RP.h.op == RGPU_OP_OUTPUT) {
			if (len + RP.h.len <= cap + (1 << 20) - 1) {
				memcpy(out + len, RP.data, RP.h.len);
				len += RP.h.len;
			}
			continue;
		}
		if (RP.status != 0)
			FAILF("printf_200k: CTX_SYNC status %d", RP.status);
		break;
	}
	if (len != lines * linelen)
		FAILF("printf_200k: %zu bytes of device output, want %zu", len, lines * linelen);
	/* every line once (a GPU prints threads in any order) */
	char *seen = calloc((size_t)lines, 1);
	int good = 0;
	for (size_t off = 0; off + linelen <= len; off += linelen) {
		int i = -1, of = -1;
		char tail[40] = "";
		if (sscanf(out + off, "rgpu printf line %8d of %8d: %26s", &i, &of, tail) == 3 &&
		    of == lines && i >= 0 && i < lines && !seen[i] && !strcmp(tail, "abcdefghijklmnopqrstuvwxyz") &&
		    out[off + linelen - 1] == '\n') {
			seen[i] = 1;
			good++;
		}
	}
	if (good != lines)
		FAILF("printf_200k: %d of %d lines intact", good, lines);
	else
		printf("t_worker: printf_200k: %zu bytes, %d lines intact\n", len, good);
	free(seen);
	free(out);
	close(c.fd);
}

static void expect_invalid(struct raw *c, uint64_t ctx, const char *what, const void *img, size_t n)
{
	int32_t st;
	module_load(c, ctx, img, n, &st);
	if (st != CUDA_ERROR_INVALID_IMAGE)
		FAILF("bad_images: %s: status %d, want CUDA_ERROR_INVALID_IMAGE", what, st);
}

static void test_bad_images(void)
{
	struct raw c;
	uint64_t ctx;
	int32_t st;
	if (raw_session(&c, host, port, &ctx) < 0) {
		FAILF("bad_images: no session");
		return;
	}
	uint8_t b[256];
	/* fatbin header claiming 1 MiB after 64 bytes sent */
	memset(b, 0, sizeof(b));
	uint32_t magic = 0xBA55ED50u;
	memcpy(b, &magic, 4);
	b[4] = 1;
	b[6] = 16;
	uint64_t big = 1u << 20;
	memcpy(b + 8, &big, 8);
	expect_invalid(&c, ctx, "fatbin longer than sent", b, 64);
	/* a fatbin entry running past the fatbin */
	uint64_t fat = 32;
	memcpy(b + 8, &fat, 8);
	uint32_t eh = 16;
	memcpy(b + 16 + 4, &eh, 4);
	uint64_t es = 4096;
	memcpy(b + 16 + 8, &es, 8);
	expect_invalid(&c, ctx, "fatbin entry past its end", b, 48);
	expect_invalid(&c, ctx, "fatbin shorter than its header", b, 8);
	/* the real fatbin, cut in half */
	expect_invalid(&c, ctx, "truncated test fatbin", test_kernels_fatbin, test_kernels_fatbin_size / 2);
	/* ELF: header only, section table past the end */
	Elf64_Ehdr e;
	memset(&e, 0, sizeof(e));
	memcpy(e.e_ident, ELFMAG, SELFMAG);
	e.e_ident[EI_CLASS] = ELFCLASS64;
	e.e_ident[EI_DATA] = ELFDATA2LSB;
	e.e_ehsize = sizeof(e);
	e.e_shentsize = sizeof(Elf64_Shdr);
	e.e_shnum = 4;
	e.e_shoff = 4096;
	expect_invalid(&c, ctx, "ELF section table past the end", &e, sizeof(e));
	expect_invalid(&c, ctx, "ELF shorter than its header", &e, 20);
	/* a section whose data lies past the end */
	uint8_t elf[sizeof(Elf64_Ehdr) + sizeof(Elf64_Shdr)];
	Elf64_Shdr sh;
	memset(&sh, 0, sizeof(sh));
	sh.sh_type = SHT_PROGBITS;
	sh.sh_offset = 64;
	sh.sh_size = 1u << 20;
	e.e_shnum = 1;
	e.e_shoff = sizeof(e);
	memcpy(elf, &e, sizeof(e));
	memcpy(elf + sizeof(e), &sh, sizeof(sh));
	expect_invalid(&c, ctx, "ELF section past the end", elf, sizeof(elf));
	/* "PTX" without its NUL */
	expect_invalid(&c, ctx, "PTX without NUL", ".version 8.0 .target sm_90", 26);
	/* the whole fatbin still loads on the same session */
	module_load(&c, ctx, test_kernels_fatbin, test_kernels_fatbin_size, &st);
	if (st != 0)
		FAILF("bad_images: the intact fatbin afterwards: %d", st);
	close(c.fd);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: t_worker HOST PORT\n");
		return 2;
	}
	host = argv[1];
	port = (unsigned)atoi(argv[2]);
	wbuf_init(&W);
	test_deferred();
	test_stale_function();
	sync_case("sync_overtaken_stream", RGPU_OP_STREAM_SYNC);
	sync_case("sync_overtaken_ctx", RGPU_OP_CTX_SYNC);
	sync_case("sync_overtaken_event", RGPU_OP_EVENT_SYNC);
	test_printf();
	test_bad_images();
	wbuf_free(&W);
	free(RP.data);
	if (failures) {
		fprintf(stderr, "t_worker: %d failure(s)\n", failures);
		return 1;
	}
	printf("t_worker: PASS\n");
	return 0;
}
