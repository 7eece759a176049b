/* lib/size.c: sizes as users type them, and the messages for nonsense. */
#include "tap.h"
#include "size.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

static void good(const char *s, uint64_t want)
{
	char err[256] = "";
	uint64_t v = 12345;
	int rc = rgpu_parse_size(s, &v, err, sizeof(err));
	ok(rc == 0 && v == want, "'%s' = %llu (got rc %d, %llu, '%s')", s,
	   (unsigned long long)want, rc, (unsigned long long)v, err);
}

static void bad(const char *s, const char *msg)
{
	char err[256] = "";
	uint64_t v = 12345;
	int rc = rgpu_parse_size(s, &v, err, sizeof(err));
	ok(rc == -1, "'%s' refused", s ? s : "(null)");
	ok(v == 12345, "'%s' leaves the output alone", s ? s : "(null)");
	like(err, msg, "'%s': message says \"%s\"", s ? s : "(null)", msg);
}

int main(void)
{
	good("2G", 2 * GiB);
	good("512M", 512 * MiB);
	good("1.5G", 3 * GiB / 2);
	good("4096K", 4 * MiB);
	good("2GiB", 2 * GiB);
	good("2gib", 2 * GiB);
	good("2GB", 2 * GiB);
	good("100", 100 * MiB);
	good("1T", TiB);
	good("0.5M", 512 * KiB);
	good("1k", KiB);
	good("4096B", 4096);
	good("1MiB", MiB);
	good("80G", 80 * GiB);

	bad("abc", "not a size");
	bad("", "empty");
	bad(NULL, "empty");
	bad("-1", "not a size");
	bad("2X", "unknown unit 'X'");
	bad("0", "zero");
	bad("0G", "zero");
	bad("2GX", "trailing");
	bad("2 G", "unknown unit");
	bad("G", "not a size");
	bad("99999999999T", "too large");
	bad("inf", "not a size");
	bad("nan", "not a size");

	char buf[32];
	rgpu_format_size(2 * GiB, buf, sizeof(buf));
	is_str(buf, "2.0 GiB", "format 2 GiB");
	rgpu_format_size(512, buf, sizeof(buf));
	is_str(buf, "512 B", "format 512 B");
	rgpu_format_size(1536 * KiB, buf, sizeof(buf));
	is_str(buf, "1.5 MiB", "format 1.5 MiB");
	rgpu_format_size(3 * TiB, buf, sizeof(buf));
	is_str(buf, "3.0 TiB", "format 3 TiB");
	return tap_done();
}
