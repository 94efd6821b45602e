/* SPDX-License-Identifier: Apache-2.0 */
/* The copy planner of libvram's GPU halves (libvram/vmm/copy.c) against a
 * recording driver: pieces cut from uneven spans and spread round-robin,
 * the settings and their bounds, fewer streams when the driver makes fewer
 * (none is an error), and a failed piece or sync that still waits for
 * every stream used and reports the first failure. The CUDA and HIP fakes
 * (client_cuda_test.c, client_hip_test.c) check the same through each
 * half. */
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "attr.h"
#include "error.h"
#include "test.h"

#define MiB (1ull << 20)
#define MAX_CALLS 256

struct call {
	char what; /* 'c' memcpy, 's' sync */
	uintptr_t dev;
	size_t len;
	void *stream;
};

struct rec {
	struct call calls[MAX_CALLS];
	int n;
	int streams_made;
	int make_at_most; /* stream_create fails past this many */
	int fail_copy_at; /* the copy of this index fails (-1: none) */
	int fail_sync_at; /* the sync of this index fails (-1: none) */
	int copies, syncs;
};

static int rec_stream_create(void *drv, void **stream)
{
	struct rec *r = drv;

	if (r->streams_made >= r->make_at_most)
		return error_set(ENOMEM, "no more streams");
	*stream = (void *)(uintptr_t)(0x100 + r->streams_made++);
	return 0;
}

static int rec_memcpy_async(void *drv, int to_host UNUSED, uintptr_t dev, void *host UNUSED,
			    size_t len, void *stream)
{
	struct rec *r = drv;

	ASSERT(r->n < MAX_CALLS);
	r->calls[r->n++] = (struct call){ 'c', dev, len, stream };
	if (r->copies++ == r->fail_copy_at)
		return error_set(EIO, "piece %d failed", r->copies - 1);
	return 0;
}

static int rec_stream_sync(void *drv, void *stream)
{
	struct rec *r = drv;

	ASSERT(r->n < MAX_CALLS);
	r->calls[r->n++] = (struct call){ 's', 0, 0, stream };
	if (r->syncs++ == r->fail_sync_at)
		return error_set(EINVAL, "sync %d failed", r->syncs - 1);
	return 0;
}

static const struct vmm_copy_ops rec_ops = {
	.stream_create = rec_stream_create,
	.memcpy_async = rec_memcpy_async,
	.stream_sync = rec_stream_sync,
};

static struct rec *rec_new(struct vmm_copy *c, const char *streams,
			   const char *piece_mb)
{
	struct rec *r = calloc(1, sizeof(*r));

	ASSERT(r != NULL);
	r->make_at_most = 1000;
	r->fail_copy_at = r->fail_sync_at = -1;
	if (streams)
		setenv("TEST_COPY_STREAMS", streams, 1);
	if (piece_mb)
		setenv("TEST_COPY_PIECE_MB", piece_mb, 1);
	vmm_copy_init(c, &rec_ops, r, "TEST_COPY_STREAMS",
		      "TEST_COPY_PIECE_MB");
	return r;
}

static int count(const struct rec *r, char what)
{
	int n = 0;
	for (int i = 0; i < r->n; i++)
		n += r->calls[i].what == what;
	return n;
}

TEST(pieces_round_robin_then_every_stream_synced)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "3", "1");
	char host[1];
	struct vmm_span spans[2] = {
		{ 0x10000000, host, 2 * MiB + 5 }, /* 3 pieces */
		{ 0x20000000, host, MiB },	   /* 1 piece */
	};

	ASSERT_OK(vmm_copy_run(&c, 2, 1, spans, 2));
	ASSERT_EQ(r->streams_made, 3);
	ASSERT_EQ(r->n, 4 + 3);
	size_t lens[4] = { MiB, MiB, 5, MiB };
	uintptr_t devs[4] = { 0x10000000, 0x10000000 + MiB,
			      0x10000000 + 2 * MiB, 0x20000000 };
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(r->calls[i].what, 'c');
		ASSERT_UEQ(r->calls[i].len, lens[i]);
		ASSERT_UEQ(r->calls[i].dev, devs[i]);
		ASSERT(r->calls[i].stream ==
		       (void *)(uintptr_t)(0x100 + i % 3));
	}
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(r->calls[4 + i].what, 's');
		ASSERT(r->calls[4 + i].stream ==
		       (void *)(uintptr_t)(0x100 + i));
	}
	/* Streams are made once per device; another device gets its own. */
	ASSERT_OK(vmm_copy_run(&c, 2, 0, spans, 1));
	ASSERT_EQ(r->streams_made, 3);
	ASSERT_OK(vmm_copy_run(&c, 5, 0, spans, 1));
	ASSERT_EQ(r->streams_made, 6);
	ASSERT_EQ(vmm_copy_run(&c, VMM_MAX_DEVICES, 0, spans, 1), -ENODEV);
	vmm_copy_fini(&c);
	free(r);
}

TEST(only_the_streams_used_are_synced)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "4", NULL);
	char host[1];
	struct vmm_span span = { 0x1000, host, 100 };

	/* Default piece (256 MiB): one piece, one stream waited for. */
	ASSERT_OK(vmm_copy_run(&c, 0, 1, &span, 1));
	ASSERT_EQ(count(r, 'c'), 1);
	ASSERT_EQ(count(r, 's'), 1);
	span.len = 256 * MiB + 1;
	r->n = 0;
	ASSERT_OK(vmm_copy_run(&c, 0, 1, &span, 1));
	ASSERT_EQ(count(r, 'c'), 2);
	ASSERT_EQ(count(r, 's'), 2);
	vmm_copy_fini(&c);
	free(r);
}

TEST(settings_out_of_range_take_the_defaults)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "17", "0");
	char host[1];
	struct vmm_span span = { 0x1000, host, 10 };

	ASSERT_OK(vmm_copy_run(&c, 0, 1, &span, 1));
	ASSERT_EQ(c.streams, 2);
	ASSERT_UEQ(c.piece, 256 * MiB);
	ASSERT_EQ(r->streams_made, 2);
	vmm_copy_fini(&c);
	free(r);
}

TEST(fewer_streams_will_do_none_will_not)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "4", "1");
	char host[1];
	struct vmm_span span = { 0x1000, host, 3 * MiB };

	r->make_at_most = 0;
	ASSERT_EQ(vmm_copy_run(&c, 0, 1, &span, 1), -ENOMEM);
	ASSERT(strstr(error_get(), "no more streams") != NULL);
	ASSERT_EQ(r->n, 0);
	r->make_at_most = 2;
	ASSERT_OK(vmm_copy_run(&c, 0, 1, &span, 1));
	ASSERT_EQ(c.queues[0][0].n_streams, 2);
	ASSERT_EQ(count(r, 'c'), 3);
	ASSERT_EQ(count(r, 's'), 2);
	vmm_copy_fini(&c);
	free(r);
}

TEST(a_failure_still_waits_and_reports_the_first)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "3", "1");
	char host[1];
	struct vmm_span span = { 0x1000, host, 8 * MiB };

	/* The third piece fails: nothing more is issued, the three streams
	 * used are waited for, and a later failed sync does not replace the
	 * copy's error. */
	r->fail_copy_at = 2;
	r->fail_sync_at = 1;
	ASSERT_EQ(vmm_copy_run(&c, 0, 0, &span, 1), -EIO);
	ASSERT_EQ(count(r, 'c'), 3);
	ASSERT_EQ(count(r, 's'), 3);
	ASSERT(strstr(error_get(), "piece 2 failed") != NULL);

	/* A failed sync alone is the error, and the others are still
	 * waited for. */
	r->n = 0;
	r->copies = r->syncs = 0;
	r->fail_copy_at = -1;
	r->fail_sync_at = 0;
	ASSERT_EQ(vmm_copy_run(&c, 0, 0, &span, 1), -EINVAL);
	ASSERT_EQ(count(r, 's'), 3);
	ASSERT(strstr(error_get(), "sync 0 failed") != NULL);
	vmm_copy_fini(&c);
	free(r);
}

TEST(a_lane_is_issued_now_and_waited_for_alone)
{
	struct vmm_copy c;
	struct rec *r = rec_new(&c, "2", "1");
	char host[1];
	struct vmm_span span = { 0x1000, host, 3 * MiB };

	/* Issued: three pieces on lane 0's two streams, none waited for. */
	ASSERT_OK(vmm_copy_issue(&c, 0, 0, 0, &span, 1));
	ASSERT_EQ(count(r, 'c'), 3);
	ASSERT_EQ(count(r, 's'), 0);
	/* Lane 1 has streams of its own. */
	span.dev = 0x9000000;
	ASSERT_OK(vmm_copy_issue(&c, 0, 1, 0, &span, 1));
	ASSERT_EQ(r->streams_made, 4);
	for (int i = 3; i < 6; i++)
		ASSERT(r->calls[i].stream ==
		       (void *)(uintptr_t)(0x102 + (i - 3) % 2));
	/* Waiting for lane 0 syncs its streams only. */
	r->n = 0;
	ASSERT_OK(vmm_copy_wait(&c, 0, 0));
	ASSERT_EQ(count(r, 's'), 2);
	ASSERT(r->calls[0].stream == (void *)(uintptr_t)0x100);
	ASSERT(r->calls[1].stream == (void *)(uintptr_t)0x101);
	/* A piece that fails to queue is the issue's error; its lane is
	 * still waited for whole, and a failed sync is the wait's. */
	r->n = 0;
	r->copies = r->syncs = 0;
	r->fail_copy_at = 1;
	ASSERT_EQ(vmm_copy_issue(&c, 0, 1, 0, &span, 1), -EIO);
	ASSERT_EQ(count(r, 'c'), 2);
	r->fail_sync_at = 1;
	ASSERT_EQ(vmm_copy_wait(&c, 0, 1), -EINVAL);
	ASSERT_EQ(count(r, 's'), 2);
	ASSERT(strstr(error_get(), "sync 1 failed") != NULL);
	/* No such lane or device: refused before anything is queued, and
	 * its wait has nothing to wait for. */
	r->n = 0;
	ASSERT_EQ(vmm_copy_issue(&c, 0, VMM_COPY_LANES, 0, &span, 1), -EINVAL);
	ASSERT_EQ(vmm_copy_issue(&c, VMM_MAX_DEVICES, 0, 0, &span, 1), -ENODEV);
	ASSERT_OK(vmm_copy_wait(&c, 0, VMM_COPY_LANES));
	ASSERT_EQ(r->n, 0);
	void *streams[VMM_COPY_LANES * VMM_COPY_MAX_STREAMS];
	ASSERT_EQ(vmm_copy_streams(&c, 0, streams), 4);
	ASSERT_EQ(vmm_copy_streams(&c, 1, streams), 0);
	vmm_copy_fini(&c);
	free(r);
}
