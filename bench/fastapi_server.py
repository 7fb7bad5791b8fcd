#!/usr/bin/python3
"""The peer for pillar's serving benchmark: what a user writes without pillar.

FastAPI + uvicorn (Debian's python3-fastapi, python3-uvicorn) serving the same TorchScript
model through the same Open Inference Protocol JSON route, with a bearer-key check (a SHA-256
compare, as pillar does), so both servers do the same work per request.

    /usr/bin/python3 bench/fastapi_server.py MODEL_PT KEY PORT WORKERS [standard|plain]

"standard" (the default) runs uvicorn with httptools and uvloop, as `pip install
uvicorn[standard]` does; "plain" runs its pure-Python defaults (h11, asyncio), as a bare
`pip install uvicorn` does.
"""
import hashlib
import hmac
import sys

import torch
import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request

MODEL_PT, KEY, PORT, WORKERS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
FLAVOR = sys.argv[5] if len(sys.argv) > 5 else "standard"
KEY_HASH = hashlib.sha256(KEY.encode()).digest()

torch.set_num_threads(1)
model = torch.jit.load(MODEL_PT).eval()
app = FastAPI()


@app.post("/v2/models/digits/infer")
async def infer(request: Request, authorization: str = Header(default="")):
    if not authorization.startswith("Bearer ") or not hmac.compare_digest(
            hashlib.sha256(authorization[7:].encode()).digest(), KEY_HASH):
        raise HTTPException(status_code=401, detail="unauthorized")
    body = await request.json()
    tensor = body["inputs"][0]
    x = torch.tensor(tensor["data"], dtype=torch.float32).reshape(tensor["shape"])
    with torch.inference_mode():
        y = model(x)
    return {"model_name": "digits", "model_version": "1",
            "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": list(y.shape),
                         "data": y.flatten().tolist()}]}


if __name__ == "__main__":
    uvicorn.run("fastapi_server:app", host="127.0.0.1", port=PORT, workers=WORKERS,
                http="httptools" if FLAVOR == "standard" else "h11",
                loop="uvloop" if FLAVOR == "standard" else "asyncio",
                log_level="warning", access_log=False)
