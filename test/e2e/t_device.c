/* Device enumeration and properties: count matches RGPU_SERVERS, names,
 * distinct UUIDs, memory, every attribute answers, sane compute capability.
 *
 * T_ALLOW_SAME_UUID=1: two entries may name the same physical GPU (the GPU
 * suite on a one-GPU machine), so UUIDs need not differ. */
#include "common.h"

static int count_entries(const char *s)
{
	int n = 1;
	for (; *s; s++)
		n += *s == ',';
	return n;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	CK(cuInit(0));
	EXPECT_RC(cuInit(0), CUDA_SUCCESS); /* a second cuInit is harmless */

	int ver = 0;
	CK(cuDriverGetVersion(&ver));
	CHECK(ver >= 12000 && ver < 100000, "driver version %d", ver);
	say("driver version %d", ver);

	int n = -1;
	CK(cuDeviceGetCount(&n));
	if (via_rgpu()) {
		int want = count_entries(getenv("RGPU_SERVERS"));
		CHECK(n == want, "cuDeviceGetCount = %d, RGPU_SERVERS has %d entries", n, want);
	} else {
		CHECK(n >= 1, "cuDeviceGetCount = %d", n);
	}
	say("%d device(s)", n);

	CUuuid *uuids = xmalloc(sizeof(CUuuid) * (size_t)n);
	int same_ok = env_long("T_ALLOW_SAME_UUID", 0) != 0;
	uint64_t attr_digest = 0;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CK(cuDeviceGet(&d, i));
		char name[256];
		memset(name, 0x7f, sizeof(name));
		CK(cuDeviceGetName(name, (int)sizeof(name), d));
		CHECK(memchr(name, '\0', sizeof(name)) != NULL, "device %d name is not terminated", i);
		CHECK(name[0] != '\0', "device %d has an empty name", i);
		/* a short buffer still gets a terminated prefix */
		char shortname[5];
		CK(cuDeviceGetName(shortname, (int)sizeof(shortname), d));
		CHECK(memchr(shortname, '\0', sizeof(shortname)) != NULL &&
		      strncmp(shortname, name, strlen(shortname)) == 0,
		      "device %d: name into 5 bytes is '%.5s', not a prefix of '%s'", i, shortname, name);

		CK(cuDeviceGetUuid(&uuids[i], d));
		static const CUuuid zero;
		CHECK(memcmp(&uuids[i], &zero, sizeof(zero)) != 0, "device %d has an all-zero UUID", i);
		for (int j = 0; j < i && !same_ok; j++)
			CHECK(memcmp(&uuids[i], &uuids[j], sizeof(CUuuid)) != 0,
			      "devices %d and %d have the same UUID", j, i);

		size_t mem = 0;
		CK(cuDeviceTotalMem(&mem, d));
		CHECK(mem > 0, "device %d total memory is 0", i);

		int major = -1, minor = -1;
		CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
		CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
		CHECK(major >= 3 && major <= 20 && minor >= 0 && minor <= 9,
		      "device %d compute capability %d.%d", i, major, minor);

		int bad = 0;
		uint64_t h = 0;
		for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
			int v = -12345;
			CUresult rc = cuDeviceGetAttribute(&v, (CUdevice_attribute)a, d);
			if (rc != CUDA_SUCCESS) {
				fprintf(stderr, "%s: device %d attribute %d: %s\n", e2e_prog, i, a, cu_name(rc));
				bad++;
			}
			h = fnv1a(&v, sizeof(v), h);
			if (env_long("T_VERBOSE", 0))
				printf("ATTR %d %d %d\n", i, a, v);
		}
		CHECK(bad == 0, "%d of %d attributes of device %d did not answer CUDA_SUCCESS",
		      bad, CU_DEVICE_ATTRIBUTE_MAX - 1, i);
		int tpb = 0, sms = 0, warp = 0;
		CK(cuDeviceGetAttribute(&tpb, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d));
		CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
		CK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d));
		CHECK(tpb >= 256 && tpb <= 4096, "device %d max threads per block %d", i, tpb);
		CHECK(sms >= 1, "device %d has %d SMs", i, sms);
		CHECK(warp == 32, "device %d warp size %d", i, warp);

		/* out-of-range attribute and device */
		int v;
		CUresult rc = cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, d);
		CHECK(rc != CUDA_SUCCESS, "attribute CU_DEVICE_ATTRIBUTE_MAX answered CUDA_SUCCESS");

		say("device %d: %s, cc %d.%d, %zu MiB, %d SMs", i, name, major, minor, mem >> 20, sms);
		printf("RESULT device%d-name-cc %s/%d.%d\n", i, name, major, minor);
		attr_digest = fnv1a(&h, sizeof(h), attr_digest);
		printf("INFO device%d-attrs %016" PRIx64 "\n", i, h);
	}
	CUdevice d;
	EXPECT_RC(cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
	EXPECT_RC(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
	free(uuids);
	say("PASS");
	return 0;
}
