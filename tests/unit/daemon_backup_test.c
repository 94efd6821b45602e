/* SPDX-License-Identifier: Apache-2.0 */
/* daemon/backup.c's release on a libuv worker: it gives every page of a
 * backup back in pieces, and a stop (what a pause does before it saves)
 * means no piece is punched afterwards, so content written after the stop
 * survives however far the worker had got. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backup.h"
#include "test.h"

#define SIZE (256ull << 20)

static int filled_memfd(uint8_t **map)
{
	int fd = backup_create(NULL, 1, "t", SIZE, NULL);
	ASSERT(fd >= 0);
	*map = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT(*map != MAP_FAILED);
	memset(*map, 0xa5, SIZE);
	ASSERT(backup_held(fd) >= SIZE);
	return fd;
}

TEST(release_on_a_worker_gives_every_page_back)
{
	uv_loop_t loop;
	struct backup_job *job = NULL;
	uint8_t *map;
	int fd = filled_memfd(&map);

	ASSERT_OK(uv_loop_init(&loop));
	backup_set_loop(&loop);
	ASSERT_OK(backup_release_start(fd, &job));
	ASSERT(job != NULL);
	ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
	ASSERT(job == NULL);
	ASSERT_UEQ(backup_held(fd), 0);
	ASSERT_EQ(backup_jobs_running(), 0);
	/* Its size and mapping stay: the next pause writes into it again. */
	ASSERT_EQ(map[SIZE - 1], 0);
	map[0] = 1;
	ASSERT(backup_held(fd) > 0);
	/* Nothing held: no job. */
	ASSERT_OK(backup_release(fd));
	ASSERT_OK(backup_release_start(fd, &job));
	ASSERT(job == NULL);
	munmap(map, SIZE);
	backup_destroy(fd, NULL);
	ASSERT_OK(uv_loop_close(&loop));
}

/* Stopped at once, with the worker maybe mid-way: what is written after
 * the stop (the last piece, which a worker that went on would punch last)
 * is kept. */
TEST(release_stopped_keeps_what_is_written_after)
{
	uv_loop_t loop;
	struct backup_job *job = NULL;
	uint8_t *map;
	int fd = filled_memfd(&map);

	ASSERT_OK(uv_loop_init(&loop));
	backup_set_loop(&loop);
	ASSERT_OK(backup_release_start(fd, &job));
	backup_job_stop(&job);
	ASSERT(job == NULL);
	memset(map + SIZE - BACKUP_RELEASE_STEP, 0x5a, BACKUP_RELEASE_STEP);
	ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
	ASSERT_EQ(backup_jobs_running(), 0);
	for (uint64_t i = SIZE - BACKUP_RELEASE_STEP; i < SIZE; i += 4096)
		ASSERT_EQ(map[i], 0x5a);
	/* A fd closed after the stop is never used by the worker again. */
	munmap(map, SIZE);
	backup_destroy(fd, NULL);
	ASSERT_OK(uv_loop_close(&loop));
}
