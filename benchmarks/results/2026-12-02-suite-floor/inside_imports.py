"""Classify the imports inside functions of tierload/ by what each defers (run from anywhere; writes /tmp/hoist/classes.json)."""
import ast, os, json, subprocess, collections
root=os.path.abspath(os.path.join(os.path.dirname(__file__), "../../.."))  # the repository
found=[]
for dp,dn,fn in os.walk(os.path.join(root,"tierload")):
    if "__pycache__" in dp: continue
    for f in fn:
        if not f.endswith(".py"): continue
        path=os.path.join(dp,f); mod=os.path.relpath(path,root)[:-3].replace(os.sep,".")
        if mod.endswith(".__init__"): mod=mod[:-9]
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node,(ast.FunctionDef,ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub,ast.ImportFrom) and sub.module and sub.level==0:
                        found.append((mod,sub.module))
                    elif isinstance(sub,ast.Import):
                        for a in sub.names: found.append((mod,a.name))
cache={}
def closure(m):
    if m not in cache:
        r=subprocess.run([f"{root}/.venv/bin/python","-c",f"import sys,json,importlib; importlib.import_module({m!r}); print(json.dumps(sorted(sys.modules)))"],capture_output=True,text=True,cwd=root)
        cache[m]=set(json.loads(r.stdout)) if r.returncode==0 else None
    return cache[m]
HEAVY=("ray","s3fs","pyarrow.compute","torch","numba","botocore","aiobotocore","yaml","obstore","aiohttp","gcsfs","adlfs","kvikio","psutil","rich","tqdm","click","scipy","PIL","pyarrow.parquet","pyarrow.dataset","multiprocessing","concurrent.futures","asyncio")
cat=collections.Counter(); heavy=collections.Counter(); rows=[]
for m,t in found:
    cm=closure(m); ct=closure(t)
    if cm is None or ct is None: cat["unimportable alone"]+=1; continue
    extra=ct-cm
    if not extra: cat["already loaded"]+=1; rows.append((m,t,"already")); continue
    h=[x for x in HEAVY if x in extra]
    third=sorted({x.split(".")[0] for x in extra if not x.startswith("tierload")})
    if h: cat["defers heavy: "+h[0]]+=1
    elif third: cat["defers third-party "+",".join(third[:3])]+=1
    else: cat[f"defers tierload only"]+=1
    rows.append((m,t,len(extra),h,third[:4]))
for k,v in cat.most_common(): print(v,k)
json.dump(rows,open("/tmp/hoist/classes.json","w"))
