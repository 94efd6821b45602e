/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for the CUDA runtime (libcudart), so that libvram-preload.so
 * is tested on machines without a GPU: the program under test links this
 * library and runs with LD_PRELOAD=libvram-preload.so, which finds these
 * definitions with dlsym(RTLD_NEXT) as it finds the real runtime's.
 *
 * Device memory is host memory from malloc. The fake keeps a list of what
 * it handed out and counts calls, so a test can tell which allocations
 * reached it and whether a free of a pointer it never made came its way
 * (cudaErrorInvalidValue and a count, where real CUDA fails as well).
 * cudaStreamIsCapturing answers what cudart_fake_set_capturing() said, to
 * play a CUDA graph capture. HIP's calls of the same names are the same
 * functions (HIP's codes are CUDA's for these calls). Built by the Makefile's preload section into
 * build/tests/libcudart_fake.so; not part of any product.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define MAX_LIVE 4096

/* The counters a test reads (cudart_fake_counters). */
struct cudart_fake_counters {
	int live;	/* allocations not freed yet */
	int mallocs;	/* cudaMalloc and cudaMallocAsync that succeeded */
	int frees;	/* cudaFree/cudaFreeAsync of a live pointer */
	int bad_frees;	/* of a pointer the fake never made (or freed twice) */
	int null_frees; /* cudaFree(NULL), the context's warm-up */
	int device_syncs; /* cudaDeviceSynchronize */
	int stream_syncs; /* cudaStreamSynchronize */
};

int cudaMalloc(void **ptr, size_t size);
int cudaFree(void *ptr);
int cudaMallocAsync(void **ptr, size_t size, void *stream);
int cudaFreeAsync(void *ptr, void *stream);
int cudaGetDevice(int *dev);
int cudaSetDevice(int dev);
int cudaStreamIsCapturing(void *stream, int *status);
int cudaDeviceSynchronize(void);
int cudaStreamSynchronize(void *stream);
int hipMalloc(void **ptr, size_t size);
int hipFree(void *ptr);
int hipMallocAsync(void **ptr, size_t size, void *stream);
int hipFreeAsync(void *ptr, void *stream);
int hipGetDevice(int *dev);
int hipStreamIsCapturing(void *stream, int *status);
int hipDeviceSynchronize(void);
int hipStreamSynchronize(void *stream);
void cudart_fake_counters(struct cudart_fake_counters *out);
void cudart_fake_set_capturing(int on);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *live_ptrs[MAX_LIVE];
static struct cudart_fake_counters counts;
static int capturing;
static __thread int device;

int cudaMalloc(void **ptr, size_t size)
{
	void *p;
	int r = OUT_OF_MEMORY;

	if (!ptr)
		return INVALID_VALUE;
	if (size == 0) {
		*ptr = NULL;
		return OK;
	}
	p = malloc(size);
	if (!p)
		return OUT_OF_MEMORY;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!live_ptrs[i]) {
			live_ptrs[i] = p;
			counts.live++;
			counts.mallocs++;
			r = OK;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (r != OK) {
		free(p);
		return r;
	}
	*ptr = p;
	return OK;
}

int cudaFree(void *ptr)
{
	int found = 0;

	pthread_mutex_lock(&lock);
	if (!ptr) {
		counts.null_frees++;
		pthread_mutex_unlock(&lock);
		return OK;
	}
	for (int i = 0; i < MAX_LIVE; i++) {
		if (live_ptrs[i] == ptr) {
			live_ptrs[i] = NULL;
			counts.live--;
			counts.frees++;
			found = 1;
			break;
		}
	}
	if (!found)
		counts.bad_frees++;
	pthread_mutex_unlock(&lock);
	if (!found)
		return INVALID_VALUE;
	free(ptr);
	return OK;
}

int cudaMallocAsync(void **ptr, size_t size, void *stream)
{
	(void)stream; /* one stream: the fake runs nothing */
	return cudaMalloc(ptr, size);
}

int cudaFreeAsync(void *ptr, void *stream)
{
	(void)stream; /* one stream: the fake runs nothing */
	return ptr ? cudaFree(ptr) : INVALID_VALUE;
}

int cudaGetDevice(int *dev)
{
	*dev = device;
	return OK;
}

int cudaSetDevice(int dev)
{
	if (dev < 0 || dev > 1)
		return INVALID_VALUE;
	device = dev;
	return OK;
}

int cudaStreamIsCapturing(void *stream, int *status)
{
	(void)stream; /* one stream: the fake runs nothing */
	pthread_mutex_lock(&lock);
	*status = capturing;
	pthread_mutex_unlock(&lock);
	return OK;
}

int cudaDeviceSynchronize(void)
{
	pthread_mutex_lock(&lock);
	counts.device_syncs++;
	pthread_mutex_unlock(&lock);
	return OK;
}

int cudaStreamSynchronize(void *stream)
{
	(void)stream; /* one stream: the fake runs nothing */
	pthread_mutex_lock(&lock);
	counts.stream_syncs++;
	pthread_mutex_unlock(&lock);
	return OK;
}

int hipMalloc(void **ptr, size_t size)
{
	return cudaMalloc(ptr, size);
}

int hipFree(void *ptr)
{
	return cudaFree(ptr);
}

int hipMallocAsync(void **ptr, size_t size, void *stream)
{
	return cudaMallocAsync(ptr, size, stream);
}

int hipFreeAsync(void *ptr, void *stream)
{
	return cudaFreeAsync(ptr, stream);
}

int hipGetDevice(int *dev)
{
	return cudaGetDevice(dev);
}

int hipStreamIsCapturing(void *stream, int *status)
{
	return cudaStreamIsCapturing(stream, status);
}

int hipDeviceSynchronize(void)
{
	return cudaDeviceSynchronize();
}

int hipStreamSynchronize(void *stream)
{
	return cudaStreamSynchronize(stream);
}

void cudart_fake_counters(struct cudart_fake_counters *out)
{
	pthread_mutex_lock(&lock);
	*out = counts;
	pthread_mutex_unlock(&lock);
}

void cudart_fake_set_capturing(int on)
{
	pthread_mutex_lock(&lock);
	capturing = on ? 1 : 0;
	pthread_mutex_unlock(&lock);
}
