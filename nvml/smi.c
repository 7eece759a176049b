/*
 * nvidia-smi's private door into NVML.  nvidia-smi does not list devices
 * through the documented calls alone: it first asks the library for an
 * undocumented table of entry points (nvmlInternalGetExportTable, by a
 * 16-byte id) and refuses to run ("Mismatch in versions between
 * nvidia-smi and NVML") where the library has none.  Among the table's
 * entries it looks a device up by index (index, out handle, flags 0x22);
 * the rest it uses for data the documented calls also give.  What is
 * known of the table (its first word is its size in bytes, every other
 * word an entry point) comes from the behaviour NVIDIA's own mock NVML
 * (k8s test tooling) reproduces; nothing else of it is documented.
 *
 * So: every entry is one function that answers the by-index lookup with
 * the job's device and acknowledges anything else without writing, and
 * RGPU_NVML_DEBUG=1 logs each call, for the day a driver asks for more.
 */
#include "rgpu_nvml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define SMI_ENTRIES 512
#define SMI_LOOKUP_FLAGS 0x22

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);

/* 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4, as the bytes of a CUuuid */
static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					       0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

static int debug_on(void)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("RGPU_NVML_DEBUG");
		on = e && *e && strcmp(e, "0") != 0;
	}
	return on;
}

static nvmlReturn_t smi_entry(uintptr_t a0, void *a1, uintptr_t a2, uintptr_t a3)
{
	nvmlReturn_t rc = NVML_SUCCESS;
	if (a0 < 64 && a1 && a2 == SMI_LOOKUP_FLAGS)
		rc = nvmlDeviceGetHandleByIndex_v2((unsigned)a0, (nvmlDevice_t *)a1);
	if (debug_on())
		fprintf(stderr, "rgpu NVML: private entry (%#lx, %p, %#lx, %#lx) -> %d\n",
			(unsigned long)a0, a1, (unsigned long)a2, (unsigned long)a3, (int)rc);
	return rc;
}

API nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
	static uintptr_t entries[SMI_ENTRIES];
	if (!table || !id)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (debug_on()) {
		const unsigned char *b = id;
		fprintf(stderr, "rgpu NVML: private table asked:");
		for (int i = 0; i < 16; i++)
			fprintf(stderr, " %02x", b[i]);
		fprintf(stderr, "\n");
	}
	if (memcmp(id, smi_table_id, sizeof(smi_table_id)) != 0) {
		*table = NULL;
		return NVML_ERROR_NOT_SUPPORTED;
	}
	/* filled on every call: the same values, so racing callers agree */
	entries[0] = sizeof(entries);
	for (int i = 1; i < SMI_ENTRIES; i++)
		entries[i] = (uintptr_t)smi_entry;
	*table = entries;
	return NVML_SUCCESS;
}
