/* lib/servers.c: RGPU_SERVERS parsing, valid forms and the messages for
 * invalid ones. */
#include "tap.h"
#include "servers.h"
#include "proto.h"

static struct rgpu_server_ent ent[RGPU_MAX_DEVICES];

static int parse(const char *spec, char *err, size_t errlen)
{
	err[0] = '\0';
	memset(ent, 0xa5, sizeof(ent));
	return rgpu_servers_parse(spec, ent, RGPU_MAX_DEVICES, err, errlen);
}

static void check_ent(int i, const char *host, unsigned port, unsigned gpu, const char *spec)
{
	ok(strcmp(ent[i].host, host) == 0 && ent[i].port == port && ent[i].gpu == gpu,
	   "'%s' entry %d = %s port %u gpu %u (got '%s' %u %u)", spec, i, host, port, gpu,
	   ent[i].host, ent[i].port, ent[i].gpu);
}

static void bad(const char *spec, const char *msg1, const char *msg2)
{
	char err[256];
	int n = parse(spec, err, sizeof(err));
	is_i64(n, -1, "'%s' rejected", spec);
	like(err, msg1, "'%s': message says \"%s\"", spec, msg1);
	if (msg2)
		like(err, msg2, "'%s': message names \"%s\"", spec, msg2);
}

int main(void)
{
	char err[256];
	int n;

	n = parse("h", err, sizeof(err));
	is_i64(n, 1, "'h' is one entry (%s)", err);
	check_ent(0, "h", RGPU_DEFAULT_PORT, 0, "h");

	n = parse("h:1", err, sizeof(err));
	is_i64(n, 1, "'h:1' (%s)", err);
	check_ent(0, "h", 1, 0, "h:1");

	n = parse("h/2", err, sizeof(err));
	is_i64(n, 1, "'h/2' (%s)", err);
	check_ent(0, "h", RGPU_DEFAULT_PORT, 2, "h/2");

	n = parse("h:1/2,[::1]:7420/3", err, sizeof(err));
	is_i64(n, 2, "'h:1/2,[::1]:7420/3' (%s)", err);
	check_ent(0, "h", 1, 2, "h:1/2,[::1]:7420/3");
	check_ent(1, "::1", 7420, 3, "h:1/2,[::1]:7420/3");

	n = parse("[fe80::1]", err, sizeof(err));
	is_i64(n, 1, "'[fe80::1]' (%s)", err);
	check_ent(0, "fe80::1", RGPU_DEFAULT_PORT, 0, "[fe80::1]");

	n = parse("[::1]/5", err, sizeof(err));
	is_i64(n, 1, "'[::1]/5' (%s)", err);
	check_ent(0, "::1", RGPU_DEFAULT_PORT, 5, "[::1]/5");

	n = parse(" gpu1.example.org:65535/0 ,\tgpu2 , 10.0.0.3:1/1023 ", err, sizeof(err));
	is_i64(n, 3, "spaces and tabs around entries (%s)", err);
	check_ent(0, "gpu1.example.org", 65535, 0, "spaces");
	check_ent(1, "gpu2", RGPU_DEFAULT_PORT, 0, "spaces");
	check_ent(2, "10.0.0.3", 1, 1023, "spaces");

	n = parse("127.0.0.1:7001/0,127.0.0.1:7002/1", err, sizeof(err));
	is_i64(n, 2, "two local servers (%s)", err);
	check_ent(0, "127.0.0.1", 7001, 0, "local");
	check_ent(1, "127.0.0.1", 7002, 1, "local");

	/* the same GPU twice is allowed (two devices on one GPU) */
	n = parse("a/0,a/0", err, sizeof(err));
	is_i64(n, 2, "a GPU may be listed twice (%s)", err);

	/* max entries */
	{
		char spec[1024] = "";
		for (int i = 0; i < RGPU_MAX_DEVICES; i++)
			strcat(spec, i ? ",h" : "h");
		n = parse(spec, err, sizeof(err));
		is_i64(n, RGPU_MAX_DEVICES, "%d entries accepted (%s)", RGPU_MAX_DEVICES, err);
		strcat(spec, ",h");
		bad(spec, "more than", "64");
		struct rgpu_server_ent two[2];
		err[0] = '\0';
		n = rgpu_servers_parse("a,b,c", two, 2, err, sizeof(err));
		is_i64(n, -1, "three entries with room for two rejected");
		like(err, "more than 2", "message names the limit");
	}

	/* invalid */
	bad("", "empty", NULL);
	{
		err[0] = '\0';
		ok(rgpu_servers_parse(NULL, ent, 4, err, sizeof(err)) == -1, "NULL rejected");
		like(err, "empty", "NULL: message says empty");
	}
	bad("h,,h2", "empty entry 2", NULL);
	bad("h,", "empty entry 2", NULL);
	bad(",h", "empty entry 1", NULL);
	bad("h, ,h2", "empty entry 2", NULL);
	bad("h:0", "bad port '0'", "host h");
	bad("h:70000", "bad port '70000'", "host h");
	bad("h:65536", "bad port '65536'", NULL);
	bad("h:abc", "bad port 'abc'", "host h");
	bad("h:", "bad port", NULL);
	bad("h:-1", "bad port '-1'", NULL);
	bad("h:+5", "bad port '+5'", NULL);
	bad("h:99999999999999999999", "bad port", NULL);
	bad("ok,h:12x/1", "entry 2", "bad port '12x'");
	bad("h/x", "bad GPU index 'x'", "host h");
	bad("h/", "bad GPU index", NULL);
	bad("h/-1", "bad GPU index '-1'", NULL);
	bad("h/1024", "bad GPU index '1024'", NULL);
	bad("h:1/2x", "bad GPU index '2x'", NULL);
	bad("h:1/2 junk", "bad GPU index '2 junk'", NULL);
	bad("[::1", "unclosed '['", "[::1");
	bad("[::1]x", "unexpected 'x'", "::1");
	bad("[::1]:7420/3junk", "bad GPU index '3junk'", NULL);
	bad("[]:5", "missing", NULL);
	bad(":5", "missing", NULL);
	bad("/1", "missing", NULL);
	{
		char longhost[400];
		memset(longhost, 'a', 300);
		longhost[300] = '\0';
		bad(longhost, "too long", NULL);
	}
	bad("a,b,c:0", "entry 3", "bad port '0'");
	return tap_done();
}
