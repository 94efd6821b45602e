/* SPDX-License-Identifier: Apache-2.0 */
/* The size rule of the public structs: see abi.h. */
#include <errno.h>
#include <string.h>

#include "abi.h"
#include "error.h"

int abi_check(uint32_t size, size_t min, const char *what)
{
	if (size == 0)
		return error_set(EINVAL,
				 "struct %s has size 0: initialise it with its "
				 "INIT macro, which sets size to sizeof",
				 what);
	if (size < min)
		return error_set(EINVAL,
				 "struct %s has size %u, below the %zu bytes "
				 "of its first layout",
				 what, (unsigned)size, min);
	return 0;
}

int abi_read(void *local, size_t local_size, const void *in, size_t min,
	     const char *what)
{
	uint32_t size;
	int r;

	memcpy(&size, in, sizeof(size));
	r = abi_check(size, min, what);
	if (r < 0)
		return r;
	memset(local, 0, local_size);
	memcpy(local, in, size < local_size ? size : local_size);
	return 0;
}

void abi_write(void *out, const void *local, size_t local_size)
{
	uint32_t size;

	memcpy(&size, out, sizeof(size));
	size_t n = size < local_size ? size : local_size;
	if (n > sizeof(size))
		memcpy((char *)out + sizeof(size),
		       (const char *)local + sizeof(size), n - sizeof(size));
}

int abi_check_entry(size_t entry_size, size_t min, size_t align,
		    const char *what)
{
	if (entry_size < min || entry_size % align != 0 ||
	    entry_size > UINT32_MAX)
		return error_set(EINVAL,
				 "entry size %zu for struct %s: pass "
				 "sizeof(struct %s)",
				 entry_size, what, what);
	return 0;
}
