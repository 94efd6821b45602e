/* SPDX-License-Identifier: Apache-2.0 */
/* bench/copy_probe.py's sm-copy case: a host-to-device copy made by the
 * SMs (loads from registered host memory through unified addressing)
 * instead of a copy engine. Each thread keeps four 16-byte loads in
 * flight, each a contiguous 512-byte access per warp. n: 16-byte units,
 * a multiple of 4 * the grid's threads or not. Built to PTX by the probe
 * (nvcc -ptx) and loaded with cuModuleLoadData. */
extern "C" __global__ void copy_h2d(const uint4 *__restrict__ src,
				    uint4 *__restrict__ dst,
				    unsigned long long n)
{
	unsigned long long t = (unsigned long long)gridDim.x * blockDim.x;
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x +
			       threadIdx.x;

	for (; i + 3 * t < n; i += 4 * t) {
		uint4 a = src[i], b = src[i + t], c = src[i + 2 * t],
		      d = src[i + 3 * t];
		dst[i] = a;
		dst[i + t] = b;
		dst[i + 2 * t] = c;
		dst[i + 3 * t] = d;
	}
	for (; i < n; i += t)
		dst[i] = src[i];
}
