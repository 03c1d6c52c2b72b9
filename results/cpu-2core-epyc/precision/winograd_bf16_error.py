# Relative L2 error of Winograd F(m x m, 3x3) when its transformed operands are rounded to
# bf16 (sums in fp64 here, fp32 in a kernel), against the exact convolution of the same
# bf16 inputs, 128 channels on 24x24, uniform inputs: which tile sizes a bf16 Winograd
# could use within bench check's 1e-2 (the dtype's tolerance, docs/precision.md).
# Points: the finite interpolation points (and infinity). usage: python3 winograd_bf16_error.py
import torch, numpy as np
torch.manual_seed(0)
def bf(x): return x.to(torch.bfloat16).to(torch.float64)
def mats(pts,m,r=3):
    n=m+r-1
    AT=np.zeros((m,n)); G=np.zeros((n,r))
    for j,p in enumerate(pts):
        AT[:,j]=[p**i for i in range(m)]
        f=np.prod([p-q for q in pts if q!=p])
        G[j]=[p**k/f for k in range(r)]
    AT[m-1,n-1]=1; G[n-1,r-1]=1
    # solve BT
    rows=[];rhs=[]
    for i in range(m):
        for k in range(r):
            for l in range(n):
                row=np.zeros((n,n))
                for j in range(n): row[j,l]=AT[i,j]*G[j,k]
                rows.append(row.ravel()); rhs.append(1.0 if l==i+k else 0.0)
    sol,res,rk,_=np.linalg.lstsq(np.array(rows),np.array(rhs),rcond=None)
    BT=sol.reshape(n,n)
    assert np.allclose(np.array(rows)@sol,rhs)
    return [torch.tensor(t) for t in (BT,G,AT)]
def wino(x,w,m,BT,G,AT,rnd):
    C,H,W=x.shape; a=m+2
    xp=torch.nn.functional.pad(x,(1,1,1,1))
    tiles=xp.unfold(1,a,m).unfold(2,a,m)
    V=torch.einsum('ij,cyxjk,lk->cyxil',BT,tiles,BT)
    U=torch.einsum('ij,kcjl,ml->kcim',G,w,G)
    if rnd: V=bf(V); U=bf(U)
    M=torch.einsum('kcij,cyxij->kyxij',U,V)
    Y=torch.einsum('ij,kyxjl,ml->kyxim',AT,M,AT)
    return Y.permute(0,1,3,2,4).reshape(w.shape[0],H,W)
C,H=128,24
x=bf(torch.rand(C,H,H,dtype=torch.float64)*2-1); w=bf((torch.rand(C,C,3,3,dtype=torch.float64)*2-1)/np.sqrt(9*C))
ref=torch.nn.functional.conv2d(x[None],w,padding=1)[0]
def err(y): return ((y-ref).norm()/ref.norm()).item()
print('F(m x m, 3x3)  points                 error, exact transforms  error, bf16 operands')
for m,pts in [(2,[0,1,-1]),(3,[0,1,-1,0.5]),(3,[0,1,-1,2]),(3,[0,1,-1,-0.5]),(4,[0,1,-1,2,-2]),(4,[0,1,-1,.5,-.5]),(4,[0,1,-1,.5,-2]),(4,[0,1,-1,2,.5])]:
    BT,G,AT=mats(pts,m)
    print(f'{m:12d}  {str(pts):22s} {err(wino(x,w,m,BT,G,AT,False)):24.1e}  {err(bf(wino(x,w,m,BT,G,AT,True))):.2e}')
