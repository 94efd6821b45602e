/* SPDX-License-Identifier: Apache-2.0 */
/* backend = auto on a node with a GPU whose driver cannot be loaded is an
 * error, not a quiet fall back to host memory; on a node without a GPU, and
 * with backend = host chosen on purpose, the host backend opens. The PCI
 * devices come from a fake sysfs ($VRAM_PCI_SYSFS) and the driver
 * libraries from paths that do not exist. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "test.h"

static char sysfs[] = "/tmp/vramd-pci-XXXXXX";

/* One PCI device of vendor and class under the fake sysfs. */
static void pci_device_add(const char *addr, const char *vendor,
			   const char *cls)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", sysfs, addr);
	ASSERT_OK(mkdir(path, 0755));
	snprintf(path, sizeof(path), "%s/%s/vendor", sysfs, addr);
	ASSERT((f = fopen(path, "w")));
	fprintf(f, "%s\n", vendor);
	fclose(f);
	snprintf(path, sizeof(path), "%s/%s/class", sysfs, addr);
	ASSERT((f = fopen(path, "w")));
	fprintf(f, "%s\n", cls);
	fclose(f);
}

static void sysfs_remove(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", sysfs);
}

static void no_drivers(void)
{
	ASSERT(mkdtemp(sysfs));
	atexit(sysfs_remove);
	ASSERT_OK(setenv("VRAM_PCI_SYSFS", sysfs, 1));
	ASSERT_OK(setenv("VRAM_LIBCUDA", "/nonexistent/libcuda.so.1", 1));
	ASSERT_OK(setenv("VRAM_LIBHIP", "/nonexistent/libamdhip64.so", 1));
	/* A network card and the host bridge are not GPUs. */
	pci_device_add("0000:00:00.0", "0x8086", "0x060000");
	pci_device_add("0000:00:03.0", "0x10de", "0x020000");
}

static int open_backend(const char *name, struct backend **b)
{
	struct backend_config cfg = {
		.name = name,
		.host_capacity = 64u << 20,
		.host_devices = 1,
		.host_granularity = 2u << 20,
	};
	return backend_open(&cfg, b);
}

TEST(auto_without_gpu_uses_host)
{
	struct backend *b = NULL;

	no_drivers();
	ASSERT_OK(open_backend("auto", &b));
	ASSERT_STREQ(b->ops->name, "host");
	backend_destroy(b);
}

TEST(auto_with_nvidia_gpu_and_no_driver_fails)
{
	struct backend *b = NULL;

	no_drivers();
	pci_device_add("0000:17:00.0", "0x10de", "0x030200");
	ASSERT_LT(open_backend("auto", &b), 0);
	ASSERT(b == NULL);
}

TEST(auto_with_amd_gpu_and_no_runtime_fails)
{
	struct backend *b = NULL;

	no_drivers();
	pci_device_add("0000:c1:00.0", "0x1002", "0x038000");
	ASSERT_LT(open_backend("auto", &b), 0);
	ASSERT(b == NULL);
}

TEST(host_chosen_on_a_gpu_node_opens)
{
	struct backend *b = NULL;

	no_drivers();
	pci_device_add("0000:17:00.0", "0x10de", "0x030200");
	ASSERT_OK(open_backend("host", &b));
	ASSERT_STREQ(b->ops->name, "host");
	backend_destroy(b);
}
