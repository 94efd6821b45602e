/* SPDX-License-Identifier: Apache-2.0 */
/* export_time: where cuMemExportToShareableHandle's ~0.9 ms goes. */
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
#define L(n) static __typeof__(&n) p_##n; 
L(cuInit) L(cuDeviceGet) L(cuDevicePrimaryCtxRetain) L(cuCtxSetCurrent) L(cuMemCreate) L(cuMemExportToShareableHandle) L(cuMemRelease) L(cuDeviceGetAttribute)
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static double med(double*v,int n){double t[256];memcpy(t,v,n*sizeof*v);qsort(t,n,sizeof*t,cmp);return t[n/2];}
int main(int argc,char**argv){
 int ctx=argc>1?atoi(argv[1]):0, n=argc>2?atoi(argv[2]):20; size_t gib=argc>3?atol(argv[3]):1;
 void*h=dlopen("libcuda.so.1",RTLD_NOW); if(!h){puts("no libcuda");return 77;}
#define S(x) p_##x=dlsym(h,#x); if(!p_##x) p_##x=dlsym(h,#x "_v2");
 S(cuInit) S(cuDeviceGet) S(cuDevicePrimaryCtxRetain) S(cuCtxSetCurrent) S(cuMemCreate) S(cuMemExportToShareableHandle) S(cuMemRelease) S(cuDeviceGetAttribute)
 CUdevice d; p_cuInit(0); p_cuDeviceGet(&d,0);
 if(ctx){CUcontext c; p_cuDevicePrimaryCtxRetain(&c,d); p_cuCtxSetCurrent(c);}
 int rdma=0; p_cuDeviceGetAttribute(&rdma,CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,d);
 CUmemAllocationProp pr; memset(&pr,0,sizeof pr); pr.type=CU_MEM_ALLOCATION_TYPE_PINNED; pr.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
 pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE; pr.location.id=d; pr.allocFlags.gpuDirectRDMACapable=rdma;
 double c[256],e[256],o[256],oc[256],xc[256],r[256]; if(n>256)n=256;
 for(int i=0;i<n;i++){
  CUmemGenericAllocationHandle a; int fd=-1; double t0=now();
  if(p_cuMemCreate(&a,gib<<30,&pr,0)){puts("create failed");return 1;} double t1=now();
  if(p_cuMemExportToShareableHandle(&fd,a,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0)){puts("export failed");return 1;} double t2=now();
  int z=open("/dev/nvidiactl",O_RDWR|O_CLOEXEC); double t3=now(); if(z>=0)close(z); double t4=now();
  if(i==0){char p[64],l[256]={0};snprintf(p,64,"/proc/self/fd/%d",fd);readlink(p,l,255);printf("exported fd -> %s; open(nvidiactl) fd %d\n",l,z);}
  close(fd); double t5=now(); p_cuMemRelease(a); double t6=now();
  c[i]=t1-t0;e[i]=t2-t1;o[i]=t3-t2;oc[i]=t4-t3;xc[i]=t5-t4;r[i]=t6-t5; usleep(5000);}
 printf("ctx %d, %zu GiB x %d, rdma %d: medians ms: create %.3f export %.3f open(nvidiactl) %.3f close(it) %.3f close(exported) %.3f release %.3f\n",
  ctx,gib,n,rdma,med(c,n),med(e,n),med(o,n),med(oc,n),med(xc,n),med(r,n));
 return 0;}
