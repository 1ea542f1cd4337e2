#!/usr/bin/env python3
"""What the registry tests do to a registry that berth must not do for them: push an OCI
artifact through the distribution API, sign one as cosign does (keyed, simple signing),
make cosign key pairs, and serve a folder over HTTPS (a Helm repository). Written apart from
berth on purpose: the signatures berth verifies are made here, with Python's cryptography
(sops 1.18's virtualenv, scripts/sops), not by the code that checks them.

  registry-tool.py keygen DIR                      DIR/cosign.key, DIR/cosign.pub
  registry-tool.py push HOST REPO TAG LAYER MEDIA  a one-layer artifact; prints its digest
  registry-tool.py sign HOST REPO DIGEST KEY       a cosign signature of REPO@DIGEST
  registry-tool.py serve DIR PORT CERT KEY         HTTPS static files until killed

Pushes read BERTH_REGISTRY_CA (a CA file) and BERTH_REGISTRY_AUTH (user:password).
"""
import base64
import hashlib
import http.server
import json
import os
import ssl
import sys
import urllib.error
import urllib.request

FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"


def request(method, url, body=None, headers=None):
    context = ssl.create_default_context(cafile=os.environ["BERTH_REGISTRY_CA"])
    headers = dict(headers or {})
    auth = os.environ.get("BERTH_REGISTRY_AUTH")
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(req, context=context) as answer:
        return answer.headers, answer.read()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def upload(host, repo, data):
    headers, _ = request("POST", f"https://{host}/v2/{repo}/blobs/uploads/", b"")
    location = headers["Location"]
    if location.startswith("/"):
        location = f"https://{host}{location}"
    sep = "&" if "?" in location else "?"
    request("PUT", f"{location}{sep}digest={digest(data)}", data,
            {"Content-Type": "application/octet-stream"})
    return {"digest": digest(data), "size": len(data)}


def push(host, repo, tag, layer, media, config_media=None, annotations=None):
    config = b"{}"
    config_media = config_media or (HELM_CONFIG if media == HELM_CHART else FLUX_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": config_media, **upload(host, repo, config)},
        "layers": [{"mediaType": media, **upload(host, repo, layer),
                    "annotations": annotations or {}}],
    }
    body = json.dumps(manifest).encode()
    request("PUT", f"https://{host}/v2/{repo}/manifests/{tag}", body,
            {"Content-Type": MANIFEST})
    return digest(body)


def keygen(folder):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    with open(os.path.join(folder, "cosign.key"), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(os.path.join(folder, "cosign.pub"), "wb") as f:
        f.write(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def sign(host, repo, target, key_file):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    with open(key_file, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    payload = json.dumps({
        "critical": {
            "identity": {"docker-reference": f"{host}/{repo}"},
            "image": {"docker-manifest-digest": target},
            "type": "cosign container image signature",
        },
        "optional": None,
    }).encode()
    signature = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    tag = target.replace(":", "-") + ".sig"
    return push(host, repo, tag, payload, SIMPLE_SIGNING,
                config_media="application/vnd.oci.image.config.v1+json",
                annotations={"dev.cosignproject.cosign/signature": signature})


def serve(folder, port, cert, key):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=folder, **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("serving", flush=True)
    server.serve_forever()


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "keygen":
        keygen(*args)
    elif command == "push":
        host, repo, tag, layer, media = args
        with open(layer, "rb") as f:
            print(push(host, repo, tag, f.read(), media))
    elif command == "sign":
        print(sign(*args))
    elif command == "serve":
        serve(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except urllib.error.HTTPError as e:
        sys.exit(f"{e.code} {e.reason}: {e.read().decode(errors='replace')}")
