/* Module image bounds: see image.h. */
#include "image.h"

#include <elf.h>
#include <stdint.h>
#include <string.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_HDR 16     /* u32 magic, u16 version, u16 header size, u64 size */
#define FATBIN_ENTRY_HDR 16 /* u16 kind, u16, u32 header size, u64 size, ... */

static uint16_t u16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32_at(const uint8_t *p) { return (uint32_t)u16_at(p) | (uint32_t)u16_at(p + 2) << 16; }
static uint64_t u64_at(const uint8_t *p) { return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32; }

/* [off, off + len) within n, without overflow */
static int within(uint64_t off, uint64_t len, size_t n)
{
	return off <= n && len <= n - off;
}

static const char *fatbin_check(const uint8_t *p, size_t n)
{
	if (n < FATBIN_HDR)
		return "fatbin shorter than its header";
	uint16_t hsize = u16_at(p + 6);
	uint64_t size = u64_at(p + 8);
	if (hsize < FATBIN_HDR || !within(hsize, size, n))
		return "fatbin header describes more bytes than were sent";
	/* the entries, back to back in [hsize, hsize + size) */
	const uint8_t *e = p + hsize;
	for (uint64_t off = 0; off < size;) {
		if (!within(off, FATBIN_ENTRY_HDR, size))
			return "fatbin entry header past the end";
		uint32_t eh = u32_at(e + off + 4);
		uint64_t es = u64_at(e + off + 8);
		if (eh < FATBIN_ENTRY_HDR || !within(off, eh, size) || !within(off + eh, es, size))
			return "fatbin entry past the end";
		off += eh + es;
	}
	return NULL;
}

static const char *elf_check(const uint8_t *p, size_t n)
{
	Elf64_Ehdr eh;
	if (n < sizeof(eh))
		return "ELF image shorter than its header";
	memcpy(&eh, p, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
		return "not a 64-bit little-endian ELF image";
	if (eh.e_ehsize < sizeof(eh) || eh.e_ehsize > n)
		return "ELF header size out of range";
	if (eh.e_phnum && (eh.e_phentsize != sizeof(Elf64_Phdr) ||
			   !within(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), n)))
		return "ELF program headers past the end";
	if (!eh.e_shnum)
		return NULL;
	if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    !within(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), n))
		return "ELF section headers past the end";
	if (eh.e_shstrndx >= eh.e_shnum)
		return "ELF section name table index out of range";
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		memcpy(&sh, p + eh.e_shoff + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type != SHT_NOBITS && !within(sh.sh_offset, sh.sh_size, n))
			return "ELF section past the end";
	}
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, p + eh.e_phoff + i * sizeof(ph), sizeof(ph));
		if (!within(ph.p_offset, ph.p_filesz, n))
			return "ELF segment past the end";
	}
	return NULL;
}

const char *image_check(const void *img, size_t n)
{
	const uint8_t *p = img;
	/* the driver decides by content, whatever kind the client named */
	if (n >= 4 && u32_at(p) == FATBIN_MAGIC)
		return fatbin_check(p, n);
	if (n >= 4 && u32_at(p) == FATBIN_WRAPPER_MAGIC)
		return "a fatbin wrapper (it holds a pointer into the client)";
	if (n >= SELFMAG && !memcmp(p, ELFMAG, SELFMAG))
		return elf_check(p, n);
	if (!memchr(p, 0, n))
		return "PTX text without its terminating NUL";
	return NULL;
}
