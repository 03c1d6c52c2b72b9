#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static float *A,*B,*C; static volatile float sink;
static double triad(size_t mib,double budget){
  size_t n=(mib<<20)/4; double best=1e9,t0=now(); int r=0;
  while(r<3||now()-t0<budget){double t=now();
#pragma omp parallel for simd schedule(static)
    for(size_t i=0;i<n;i++)A[i]=B[i]+3.0f*C[i];
    t=now()-t; if(t<best)best=t; r++;}
  return 3.0*n*4/best/1e9;
}
__attribute__((target("avx512f"))) static double readsum(const char*buf,size_t bytes,double budget){
  double best=1e9,t0=now(); int r=0;
  while(r<3||now()-t0<budget){double t=now();
#pragma omp parallel
    {int th=omp_get_thread_num(),nt=omp_get_num_threads();
     size_t per=bytes/nt/128*128; const char*base=buf+th*per; size_t seg=per/2;
     __m512 a0=_mm512_setzero_ps(),a1=a0;
     for(size_t k=0;k<seg;k+=64){
       _mm_prefetch(base+k+4096,_MM_HINT_T0); a0=_mm512_add_ps(a0,_mm512_load_ps((const float*)(base+k)));
       _mm_prefetch(base+seg+k+4096,_MM_HINT_T0); a1=_mm512_add_ps(a1,_mm512_load_ps((const float*)(base+seg+k)));}
     sink=_mm512_reduce_add_ps(_mm512_add_ps(a0,a1));}
    t=now()-t; if(t<best)best=t; r++;}
  return bytes/best/1e9;
}
int main(void){
  size_t big=(size_t)256<<20; A=aligned_alloc(64,big);B=aligned_alloc(64,big);C=aligned_alloc(64,big);
#pragma omp parallel for
  for(size_t i=0;i<big/4;i++)A[i]=0,B[i]=1,C[i]=2;
  size_t bytes=(size_t)1<<30; char*buf=aligned_alloc(4096,bytes);
#pragma omp parallel for
  for(size_t i=0;i<bytes;i+=4096)memset(buf+i,1,4096);
  printf("round triad3x21 triad3x128 read1GiB(2 streams/thread)\n");
  for(int r=0;r<8;r++){double a=triad(21,0.1),b=triad(128,0.1),c=readsum(buf,bytes,0.1);printf("%d %.1f %.1f %.1f\n",r,a,b,c);}
}
