"""KServe 0.21's storage rules, in process: the variables' formats (patterns, STORAGE_CONFIG, STORAGE_URIS), the
URI forms (hf://, git), the S3 tunables as a real boto3 client takes them, the hand-off to kserve-storage, the
progress line's pieces, and every bad input's message."""
import inspect
import json
import os
import sys
import threading
import time

import pytest

from kserve_sdk.storage import Storage, StorageError, common, delegated, git, hf, multi, progress, resolve_model_dir, s3
from kserve_sdk.storage import settings as storage_settings
from kserve_sdk.storage.azure import chunk_concurrency

ENV = ("STORAGE_URI", "STORAGE_URIS", "STORAGE_ALLOW_PATTERNS", "STORAGE_IGNORE_PATTERNS", "STORAGE_CONFIG",
       "STORAGE_OVERRIDE_CONFIG", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_CA_BUNDLE",
       "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "S3_ENDPOINT", "S3_VERIFY_SSL", "S3_CONNECT_TIMEOUT", "S3_READ_TIMEOUT",
       "S3_MAX_ATTEMPTS", "S3_USER_VIRTUAL_BUCKET", "S3_USE_ACCELERATE", "S3_MAX_FILE_CONCURRENCY",
       "awsAnonymousCredential", "AZURE_MAX_FILE_CONCURRENCY", "AZURE_MAX_CHUNK_CONCURRENCY", "GIT_USERNAME",
       "GIT_PASSWORD", "KSERVE_SDK_STORAGE_CONCURRENCY", "KSERVE_SDK_STORAGE_PROGRESS_SECONDS", "REQUESTS_CA_BUNDLE",
       "CURL_CA_BUNDLE", "SSL_CERT_FILE", "CA_BUNDLE_CONFIGMAP_NAME", "CA_BUNDLE_VOLUME_MOUNT_POINT")


@pytest.fixture
def env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    return monkeypatch


# --- allow / ignore patterns, STORAGE_CONFIG ---------------------------------------------------------------------
@pytest.mark.parametrize("raw,patterns", [
    ('["*.safetensors", " *.json ", ""]', ["*.safetensors", "*.json"]),  # KServe's JSON array
    ('"*.bin"', ["*.bin"]),  # one JSON string
    ("*.safetensors, *.json,,", ["*.safetensors", "*.json"]),  # comma-separated
    ("[*.json", ["[*.json"]),  # not JSON: one pattern
    ("  ", None), ("[]", None), ("", None),
])
def test_pattern_variables_read_as_kserve_reads_them(raw, patterns, env):
    env.setenv("STORAGE_ALLOW_PATTERNS", raw)
    assert storage_settings.patterns_from_env("STORAGE_ALLOW_PATTERNS") == patterns


def test_storage_config_override_and_s3_keys(env):
    env.setenv("STORAGE_CONFIG", json.dumps({"type": "s3", "access_key_id": "a", "secret_access_key": "b",
                                             "endpoint_url": "http://minio:9000", "region": "eu-west-1",
                                             "anonymous": True, "verify_ssl": "0", "bucket": "models"}))
    env.setenv("STORAGE_OVERRIDE_CONFIG", json.dumps({"access_key_id": "override", "ca_bundle": "/ca.pem"}))
    assert storage_settings.s3_config() == {
        "AWS_ACCESS_KEY_ID": "override", "AWS_SECRET_ACCESS_KEY": "b", "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_DEFAULT_REGION": "eu-west-1", "awsAnonymousCredential": "true", "S3_VERIFY_SSL": "0",
        "AWS_CA_BUNDLE": "/ca.pem"}
    env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    env.setenv("S3_USE_HTTPS", "0")
    assert storage_settings.get("AWS_DEFAULT_REGION") == "eu-west-1"  # the entry wins, as KServe writes it over
    assert storage_settings.get("S3_USE_HTTPS") == "0"  # not an entry key: the environment's
    env.setenv("STORAGE_CONFIG", json.dumps({"type": "gs", "access_key_id": "a"}))
    env.delenv("STORAGE_OVERRIDE_CONFIG")
    assert storage_settings.s3_config() == {}


@pytest.mark.parametrize("name,raw,message", [
    ("STORAGE_CONFIG", '{"type": "s3", "secret_access_key": "hunter2",}',
     "STORAGE_CONFIG is not valid JSON (Expecting property name enclosed in double quotes at character 46)"),
    ("STORAGE_OVERRIDE_CONFIG", '["s3"]', "STORAGE_OVERRIDE_CONFIG must be a JSON object, got list"),
])
def test_bad_storage_config_is_named_without_its_secrets(name, raw, message, env, tmp_path):
    env.setenv(name, raw)
    with pytest.raises(StorageError) as e:
        Storage.download("s3://models/m", str(tmp_path / "m"))
    assert str(e.value) == f"cannot download s3://models/m: {message}"
    assert "hunter2" not in str(e.value) and not (tmp_path / "m").exists()


# --- S3 tunables, as a real boto3 client takes them -------------------------------------------------------------------
def test_s3_tunables_shape_the_client(env):
    env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    env.setenv("S3_CONNECT_TIMEOUT", "7")
    env.setenv("S3_READ_TIMEOUT", "11")
    env.setenv("S3_MAX_ATTEMPTS", "5")
    config = s3.client().meta.config
    assert (config.connect_timeout, config.read_timeout) == (7, 11)
    assert config.retries == {"mode": "standard", "total_max_attempts": 6}  # N retries, as KServe passes it
    env.setenv("awsAnonymousCredential", "true")
    from botocore import UNSIGNED
    assert s3.client().meta.config.signature_version is UNSIGNED


def _presigned_host(env) -> str:
    from urllib.parse import urlsplit
    return urlsplit(s3.client().generate_presigned_url("get_object", Params={"Bucket": "models", "Key": "k"})).netloc


def test_s3_addressing_accelerate_and_the_legacy_global_endpoint(env):
    env.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert _presigned_host(env) == "models.s3.amazonaws.com"  # boto3's default for AWS itself
    env.setenv("AWS_ENDPOINT_URL", "https://minio.example:9000")
    assert _presigned_host(env) == "minio.example:9000"  # path style: the bucket in the path
    env.setenv("S3_USER_VIRTUAL_BUCKET", "true")
    assert _presigned_host(env) == "models.minio.example:9000"
    env.delenv("S3_USER_VIRTUAL_BUCKET")
    env.setenv("AWS_ENDPOINT_URL", "https://s3.amazonaws.com")  # KServe: virtual outside us-east-1
    assert _presigned_host(env) == "models.s3.amazonaws.com"
    env.setenv("AWS_ENDPOINT_URL", "")
    env.setenv("S3_USE_ACCELERATE", "true")
    assert _presigned_host(env) == "models.s3-accelerate.amazonaws.com"


def test_s3_verify_setting(env, tmp_path):
    assert s3.verify() is None
    env.setenv("S3_VERIFY_SSL", "false")
    assert s3.verify() is False
    env.delenv("S3_VERIFY_SSL")
    (tmp_path / "cabundle.crt").write_text("")
    env.setenv("CA_BUNDLE_CONFIGMAP_NAME", "bundle")
    env.setenv("CA_BUNDLE_VOLUME_MOUNT_POINT", str(tmp_path))
    assert s3.verify() == str(tmp_path / "cabundle.crt")
    env.setenv("AWS_CA_BUNDLE", str(tmp_path / "mine.pem"))
    with pytest.raises(StorageError, match=r"the CA bundle .*/mine\.pem does not exist"):
        s3.verify()


def test_file_and_chunk_concurrency_variables(env):
    assert common.concurrency("S3_MAX_FILE_CONCURRENCY") == 8
    env.setenv("KSERVE_SDK_STORAGE_CONCURRENCY", "6")
    assert common.concurrency("S3_MAX_FILE_CONCURRENCY") == 6 == common.concurrency("AZURE_MAX_FILE_CONCURRENCY")
    env.setenv("S3_MAX_FILE_CONCURRENCY", "2")
    env.setenv("AZURE_MAX_FILE_CONCURRENCY", "3")
    assert (common.concurrency("S3_MAX_FILE_CONCURRENCY"), common.concurrency("AZURE_MAX_FILE_CONCURRENCY")) == (2, 3)
    assert s3.client().meta.config.max_pool_connections == 10
    assert chunk_concurrency() == 4
    env.setenv("AZURE_MAX_CHUNK_CONCURRENCY", "2")
    assert chunk_concurrency() == 2


def test_download_all_keeps_to_its_workers(tmp_path):
    running, peak, lock = [0], [0], threading.Lock()

    def fetch(name: str, path: str) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with open(path, "wb") as f:
            f.write(b"x")
        with lock:
            running[0] -= 1

    files = [(f"o{i}", f"o{i}", 1) for i in range(12)]
    common.download_all(files, str(tmp_path), fetch, str, workers=3)
    assert 1 <= peak[0] <= 3 and len(os.listdir(tmp_path)) == 12


# --- hf:// and git URIs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("uri,parsed", [("hf://org/model", ("org/model", None)),
                                        ("hf://org/model:v1.2", ("org/model", "v1.2")),
                                        ("hf://org/model:", ("org/model", None))])
def test_hf_uri_forms(uri, parsed):
    assert hf.parse(uri) == parsed


@pytest.mark.parametrize("uri,message", [
    ("hf://model", "invalid Hugging Face URI: expected 'hf://owner/model[:revision]'"),
    ("hf://org/model/extra", "invalid Hugging Face URI: expected 'hf://owner/model[:revision]'"),
    ("hf:///model", "the Hugging Face repository owner is empty (expected 'hf://owner/model[:revision]')"),
    ("hf://org/:v1", "the Hugging Face model name is empty (expected 'hf://owner/model[:revision]')"),
])
def test_bad_hf_uris_are_refused(uri, message, env, tmp_path):
    with pytest.raises(StorageError) as e:
        Storage.download(uri, str(tmp_path / "m"))
    assert str(e.value) == f"cannot download {uri}: {message}"


@pytest.mark.parametrize("uri,cloned", [
    ("https://git.example.com/org/model.git", True), ("https://git.example.com/org/model.git/", True),
    ("http://127.0.0.1:8080/org/model.git", True), ("https://user@git.example.com/model.git", True),
    # KServe's regex (https://.+\.git, searched anywhere) would clone these two; they are files here
    ("https://raw.githubusercontent.com/org/repo/main/model.joblib", False),
    ("https://org.github.io/models/model.onnx", False),
    ("s3://bucket/model.git", False), ("https://example.com/model.git.tar.gz", False),
])
def test_which_urls_are_git_repositories(uri, cloned):
    assert git.is_git(uri) is cloned


def test_git_credentials_follow_kserve_precedence(env):
    env.setenv("GIT_USERNAME", "from-env")
    env.setenv("GIT_PASSWORD", "env-secret")
    assert git.split_credentials("https://bob:url-secret@h.example/x.git") == \
        ("https://bob@h.example/x.git", "bob", "env-secret")  # the URL's user, GIT_PASSWORD
    assert git.split_credentials("https://h.example/x.git") == ("https://h.example/x.git", "from-env", "env-secret")
    env.delenv("GIT_PASSWORD")
    assert git.split_credentials("https://bob:url%40secret@h.example:8443/x.git") == \
        ("https://bob@h.example:8443/x.git", "bob", "url@secret")


# --- STORAGE_URIS -------------------------------------------------------------------------------------------------
def test_storage_uris_layout_follows_kserve_mount_paths():
    entries = multi.parse(json.dumps([{"uri": "s3://b/base", "mountPath": "/mnt/models/base/"},
                                      {"uri": "hf://o/lora", "mountPath": "/mnt/models/adapters/lora"},
                                      "gs://b/extra"]))
    assert entries[2] == multi.Entry("gs://b/extra", "/mnt/models")
    assert multi.layout(entries) == ("/mnt/models", [("s3://b/base", "base"), ("hf://o/lora", "adapters/lora"),
                                                     ("gs://b/extra", "")])
    assert multi.layout(multi.parse('[{"uri": "s3://b/m", "mountPath": "/models/a"}]')) == \
        ("/models/a", [("s3://b/m", "")])
    assert multi.common_parent(["/mnt/models/a", "/mnt/modelsx/b"]) == "/mnt"


@pytest.mark.parametrize("raw,message", [
    ("s3://b/m", "STORAGE_URIS is not valid JSON (Expecting value at character 0); expected "
                 '[{"uri": "s3://bucket/model", "mountPath": "/mnt/models/base"}, ...]'),
    ("[]", 'STORAGE_URIS must be a non-empty JSON list; expected [{"uri": "s3://bucket/model", "mountPath": '
           '"/mnt/models/base"}, ...]'),
    ("[3]", 'STORAGE_URIS[0] must be a URI or an object with "uri" and "mountPath"; expected [{"uri": '
            '"s3://bucket/model", "mountPath": "/mnt/models/base"}, ...]'),
    ('["s3://b/a", {"mountPath": "/mnt/models/x"}]', "STORAGE_URIS[1]: storage URI cannot be empty"),
    ('[{"uri": "s3://b/a", "mountPath": "/"}]', "STORAGE_URIS[0]: storage path cannot be '/'"),
    ('[{"uri": "s3://b/a", "mountPath": "models/a"}]', "STORAGE_URIS[0]: storage path must be absolute: models/a"),
    ('[{"uri": "s3://b/a", "mountPath": "/mnt/models/../etc"}]',
     "STORAGE_URIS[0]: storage path cannot contain '..' for security reasons: /mnt/models/../etc"),
    ('[{"uri": "s3://b/a", "mountPath": "/mnt/a"}, {"uri": "s3://b/b", "mountPath": "/opt/b"}]',
     "STORAGE_URIS: storage paths must have a common parent directory; ['/mnt/a', '/opt/b'] have none beyond /"),
])
def test_bad_storage_uris_are_refused(raw, message, env):
    env.setenv("STORAGE_URIS", raw)
    with pytest.raises(StorageError) as e:
        resolve_model_dir(None)
    assert str(e.value) == message


def test_storage_uri_and_storage_uris_together_are_refused(env):
    env.setenv("STORAGE_URI", "s3://b/m")
    env.setenv("STORAGE_URIS", '["s3://b/n"]')
    with pytest.raises(StorageError) as e:
        resolve_model_dir(None)
    assert str(e.value) == ("set STORAGE_URI or STORAGE_URIS, not both (KServe: setting both StorageURI and "
                            "StorageURIs is not supported)")


def test_download_files_has_kserve_signature():
    assert list(inspect.signature(Storage.download_files).parameters) == \
        ["source_uris", "out_dirs", "allow_patterns", "ignore_patterns"]
    assert list(inspect.signature(Storage.download).parameters) == \
        ["uri", "out_dir", "allow_patterns", "ignore_patterns"]


# --- handed to kserve-storage ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("uri,install", [
    ("oci://registry.example/models/llm:1.0", "pip install kserve-storage"),
    ("modelscope://qwen/Qwen2-0.5B", "pip install kserve-storage"),
    ("hdfs://namenode/models/m", "pip install kserve-storage hdfs[kerberos] krbcontext"),
    ("webhdfs://namenode/models/m", "pip install kserve-storage hdfs[kerberos] krbcontext"),
])
def test_kserve_storage_schemes_without_it_name_what_to_install(uri, install, env, tmp_path):
    env.setitem(sys.modules, "kserve_storage", None)  # as if not installed
    scheme = uri.split(":", 1)[0]
    with pytest.raises(StorageError) as e:
        Storage.download(uri, str(tmp_path / "m"))
    assert str(e.value) == (f"cannot download {uri}: unsupported scheme '{scheme}://'; supported: "
                            f"{', '.join(delegated.SUPPORTED)}; "
                            f"{scheme}:// URIs are read by KServe's kserve-storage package, which is not installed: "
                            f"{install}")
    assert not (tmp_path / "m").exists()


STAND_IN = '''
import json, os
class Storage:
    @staticmethod
    def download(uri, out_dir=None, allow_patterns=None, ignore_patterns=None):
        if uri.startswith("modelscope://"):
            raise RuntimeError("ModelScope is not installed. Please install it with: pip install modelscope-hub\\nmore")
        os.makedirs(out_dir, exist_ok=True)  # as KServe does
        with open(os.path.join(out_dir, "called.json"), "w") as f:
            json.dump([uri, out_dir, allow_patterns, ignore_patterns], f)
        return out_dir
'''


def test_kserve_storage_schemes_go_to_it_with_the_patterns(env, tmp_path):
    package = tmp_path / "site" / "kserve_storage"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    env.syspath_prepend(str(tmp_path / "site"))
    env.setitem(sys.modules, "kserve_storage", None)  # so the stand-in imported below is gone after the test
    env.delitem(sys.modules, "kserve_storage")
    env.setenv("STORAGE_IGNORE_PATTERNS", "*.md")
    out = Storage.download("oci://registry.example/models/llm:1.0", str(tmp_path / "m"), allow_patterns="*.json")
    assert out == str(tmp_path / "m")
    with open(tmp_path / "m" / "called.json") as f:
        assert json.load(f) == ["oci://registry.example/models/llm:1.0", out, ["*.json"], ["*.md"]]
    with pytest.raises(StorageError) as e:
        Storage.download("modelscope://qwen/m", str(tmp_path / "ms"))
    assert str(e.value) == ("cannot download modelscope://qwen/m: kserve_storage: RuntimeError: ModelScope is not "
                            "installed. Please install it with: pip install modelscope-hub")


# --- progress -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count,text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * 2 ** 30, "5.0 GiB")])
def test_progress_sizes_in_binary_units(count, text):
    assert progress.human(count) == text


def test_progress_counts_what_has_arrived(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(b"x" * 10_000)
    with open(tmp_path / "sparse.bin", "wb") as f:  # a file written from its end first: its size is not arrival
        f.seek(50 * 2 ** 20)
        f.write(b"y")
    os.symlink(tmp_path / "sub" / "a.bin", tmp_path / "link.bin")  # links are not counted twice
    assert 10_001 <= progress.bytes_below(str(tmp_path)) < 1_000_000


def test_progress_interval_and_total(env, tmp_path):
    assert progress.interval() == 5.0
    env.setenv("KSERVE_SDK_STORAGE_PROGRESS_SECONDS", "0.25")
    assert progress.interval() == 0.25
    progress.expect(100)  # no download watched: nothing to tell
    (tmp_path / "f").write_bytes(b"z" * 3000)
    with progress.watching("https://user:pw@example.com/m.bin?sig=abc", str(tmp_path)) as watch:
        progress.expect(2 ** 20)
        line = watch.line()
    assert line.startswith("Model storage: downloading https://user:***@example.com/m.bin?sig=***: ")
    assert " of 1.0 MiB (" in line and line.endswith("/s")
    env.setenv("KSERVE_SDK_STORAGE_PROGRESS_SECONDS", "0")
    before = threading.active_count()
    with progress.watching("https://example.com/m.bin", str(tmp_path)):
        assert threading.active_count() == before  # 0: no reporter at all


def test_an_unknown_scheme_lists_what_is_read(env, tmp_path):
    env.setitem(sys.modules, "kserve_storage", None)
    with pytest.raises(StorageError) as e:
        Storage.download("ftp://host/model.bin", str(tmp_path / "m"))
    assert str(e.value) == ("cannot download ftp://host/model.bin: unsupported scheme 'ftp://'; supported: a local "
                            "path, file://, pvc://, http://, https://, s3://, gs://, "
                            "https://<account>.blob.core.windows.net/, hf://, https://<host>/<repo>.git (pip install "
                            "kserve-storage for KServe's others: oci://, modelscope://, hdfs://, webhdfs://)")
