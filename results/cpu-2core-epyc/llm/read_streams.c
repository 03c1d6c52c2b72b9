/* Read bandwidth by streams per thread (2, 4, 8, 16; prefetched into the L2), interleaved with the triad: read_streams.txt */
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
__attribute__((target("avx512f"))) static double readsum(const char*buf,size_t bytes,int S,int hint,double budget){
  double best=1e9,t0=now(); int r=0;
  while(r<3||now()-t0<budget){double t=now();
#pragma omp parallel
    {int th=omp_get_thread_num(),nt=omp_get_num_threads();
     size_t per=bytes/nt/(64*S)*(64*S); const char*base=buf+th*per; size_t seg=per/S;
     __m512 acc[16]; for(int s=0;s<16;s++)acc[s]=_mm512_setzero_ps();
     for(size_t k=0;k<seg;k+=64){
       for(int s=0;s<S;s++){const char*p=base+s*seg+k;
         if(hint==1)_mm_prefetch(p+4096,_MM_HINT_T0); else if(hint==2)_mm_prefetch(p+4096,_MM_HINT_T1);
         acc[s]=_mm512_add_ps(acc[s],_mm512_load_ps((const float*)p));}}
     __m512 a=acc[0]; for(int s=1;s<16;s++)a=_mm512_add_ps(a,acc[s]);
     sink=_mm512_reduce_add_ps(a);}
    t=now()-t; if(t<best)best=t; r++;}
  return bytes/best/1e9;
}
int main(void){
  size_t big=(size_t)128<<20; A=aligned_alloc(64,big);B=aligned_alloc(64,big);C=aligned_alloc(64,big);
#pragma omp parallel for
  for(size_t i=0;i<big/4;i++)A[i]=0,B[i]=1,C[i]=2;
  size_t bytes=(size_t)1<<30; char*buf=aligned_alloc(4096,bytes);
#pragma omp parallel for
  for(size_t i=0;i<bytes;i+=4096)memset(buf+i,1,4096);
  int Ss[]={2,4,8,16}; const char*hn[]={"none","T0","T1"};
  printf("round triad3x128");
  for(int a=0;a<4;a++)printf(" S%d/T1",Ss[a]); printf("\n");
  for(int r=0;r<12;r++){printf("%d %.1f",r,triad(128,0.1));
    for(int a=0;a<4;a++)printf(" %.1f",readsum(buf,bytes,Ss[a],2,0.1)); printf("\n"); fflush(stdout);}
}
