"""The server entry point: KServe's CLI flags (``parser``) and ``ModelServer``.

``ModelServer().start([model])`` serves REST (Tornado) and gRPC (grpc.aio) on one asyncio loop until
SIGTERM/SIGINT, then stops accepting, lets requests in flight finish (``grace_period``) and exits.
"""
import argparse
import asyncio
import gc
import inspect
import os
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Dict, List, Optional, Sequence, TypeVar, Union

from tornado.netutil import bind_sockets

from . import context, executor, metrics, tracing
from .constants.constants import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_HTTPS_PORT,
    DEFAULT_MAX_BODY_SIZE,
    KSERVE_TLS_CERT_FILE_ENV,
    KSERVE_TLS_KEY_FILE_ENV,
    MAX_GRPC_MESSAGE_LENGTH,
)
from .dataplane import DataPlane
from .errors import NoModelReady
from .handlers import docs as docs_api
from .handlers import server_routes as server_api
from .handlers import streaming as streams_api
from .handlers import v1 as v1_api
from .handlers import v2 as v2_api
from .handlers.api import RestAPI
from .handlers.custom_routes import CustomRoutes
from .handlers.http import HTTPServerWithLimits, make_app
from .internals.argparse_exact import ExactOneDashParser
from .jobs import api as jobs_api
from .jobs import service as jobs_service
from .jobs.service import DEFAULT_STORE as DEFAULT_JOBS_STORE
from .jobs.service import JobOptions
from .logging import configure_logging, flush_pending, logger
from .model import BaseKServeModel
from .model_repository import ModelRepository
from .openai import api as openai_api
from .predictor_config import PredictorConfig
from .repository.options import RepositoryOptions
from .scheduling import SchedulingPolicy
from .scheduling.policy import DEFAULTS as SCHEDULING_FIELDS
from .scheduling.warmup import start_warmups
from .security import Security
from .server.startup import StartupFailure, bind_failure, check_port_free, warn_near_misses
from .server.tls import CertificatePair, TLSError
from .storage import StorageError, downloads_at_start, resolve_model_dir
from .timeseries import api as timeseries_api
from .triton import api as triton_api
from .utils.utils import cpu_count, non_negative_float, non_negative_int, strtobool

parser = ExactOneDashParser(add_help=False, allow_abbrev=False,
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def _flag(name: str, dest_name: Optional[str] = None, **kwargs: Any) -> None:
    """Add ``--name`` and the single-dash ``-name`` spelling of KServe's docs."""
    parser.add_argument(f"--{name}", f"-{name}", dest=dest_name or name.replace("-", "_"), **kwargs)


_flag("http_port", default=DEFAULT_HTTP_PORT, type=int, help="The HTTP port listened to by the model server.")
_flag("grpc_port", default=DEFAULT_GRPC_PORT, type=int, help="The gRPC port listened to by the model server.")
_flag("workers", default=1, type=int, help="The number of worker processes.")
_flag("max_threads", default=4, type=int, help="The max number of gRPC processing threads.")
_flag("max_asyncio_workers", default=None, type=int,
      help="Threads that run synchronous model methods (default min(32, cpus + 4)).")
_flag("inline_sync_below_ms", default=1.0, type=float,
      help="A sync preprocess/predict/postprocess that has made 16 calls under this many ms on the thread pool runs "
           "on the event loop (no thread hand-off); one slower call there sends it back to the pool. "
           "0: always the pool.")
_flag("enable_grpc", default=True, type=strtobool, help="Serve gRPC as well as REST.")
_flag("enable_docs_url", default=False, type=strtobool, help="Serve the OpenAPI documents under /docs.")
_flag("enable_latency_logging", default=True, type=strtobool,
      help="Log one line per request with preprocess/predict/postprocess latency.")
_flag("configure_logging", default=True, type=strtobool, help="Configure the server's loggers.")
_flag("log_config_file", default=None, type=str, help="A logging config file (.json, .yaml or fileConfig format).")
_flag("access_log_format", default=None, type=str, help="The format of the access log line.")
_flag("event-loop", default="auto", type=str, choices=["auto", "asyncio", "uvloop"],
      help="The event loop: uvloop (must be installed), asyncio, or auto (uvloop when it is installed).")
_flag("timeout-keep-alive", default=65, type=int, help="Seconds an idle keep-alive connection stays open.")
_flag("model_name", default="model", type=str, help="The name of the model used on the endpoint path.")
_flag("model_dir", default=None, type=str,
      help="Where the model files are (default: STORAGE_URI resolved, else /mnt/models).")
_flag("predictor_host", default=None, type=str, help="The predictor a transformer forwards to (host[:port]).")
_flag("protocol", default=None, type=str, choices=["v1", "v2", "grpc-v2"],
      help="Deprecated spelling of --predictor_protocol.")
_flag("predictor_protocol", default=(os.environ.get("PROTOCOL") or "v1").lower(), type=str,
      choices=["v1", "v2", "grpc-v2"], help="The protocol used to call the predictor (default: $PROTOCOL or v1).")
_flag("predictor_use_ssl", default=False, type=strtobool, help="Use TLS to reach the predictor.")
_flag("predictor_request_timeout_seconds", default=600, type=int, help="Timeout of a call to the predictor.")
_flag("predictor_request_retries", default=0, type=int, help="Retries of a call to the predictor.")
_flag("enable_predictor_health_check", action="store_true", help="Readiness also checks the predictor.")
_flag("grpc_max_send_message_length", default=MAX_GRPC_MESSAGE_LENGTH, type=int,
      help="The max message length for gRPC send message.")
_flag("grpc_max_receive_message_length", default=MAX_GRPC_MESSAGE_LENGTH, type=int,
      help="The max message length for gRPC receive message.")
_flag("max_batch_size", default=None, type=int,
      help="Batch concurrent v2 requests to the --model_name model into predict calls of up to this many rows.")
_flag("max_batch_latency_ms", default=None, type=float,
      help="How long a request may wait for others to join its batch (default 10 ms).")
_flag("enable_gzip", default=True, type=strtobool,
      help="gzip responses (streams too, flushed per event) for clients that accept it.")
_flag("grace_period", default=30, type=int,
      help="Seconds a stopping server waits for requests in flight before it exits.")
_flag("max_body_size", default=DEFAULT_MAX_BODY_SIZE, type=int,
      help="The largest REST request body, in bytes; a larger one is answered 413.")
_flag("max_concurrent_requests", default=None, type=int,
      help="Inference calls one worker answers at once; more are refused at once with 503 / UNAVAILABLE and "
           "Retry-After (default: no limit).")
_flag("request_timeout_seconds", default=None, type=float,
      help="Seconds an inference call may take before it is cancelled and answered 504 / DEADLINE_EXCEEDED "
           "(default: no limit; a request's `timeout` parameter, in microseconds, can only shorten it).")
# A model's scheduling policy (kserve_sdk.SchedulingPolicy, docs/scheduling.md): these are the defaults of
# every model's fields that its own `scheduling` leaves out, with Triton's names.
_flag("model_instance_count", dest_name="instance_count", default=0, type=non_negative_int,
      help="Calls of one model that run at once in a worker; more wait in the model's queue (0: no limit).")
_flag("max_queue_size", default=0, type=non_negative_int,
      help="Calls that may wait in one model's queue; one more is answered 503 / UNAVAILABLE (0: no limit).")
_flag("priority_levels", default=0, type=non_negative_int,
      help="Priorities a request may ask for with its `priority` parameter, 1 the highest (0: none).")
_flag("default_priority_level", default=0, type=non_negative_int,
      help="The priority of a request that asks for none (0: the lowest level).")
_flag("default_timeout_microseconds", default=0, type=non_negative_int,
      help="How long a call may wait in its model's queue (0: no limit).")
_flag("timeout_action", default="REJECT", type=str.upper, choices=["REJECT", "DELAY"],
      help="A waiting call whose timeout passes is answered 504 (REJECT) or runs after its level's others (DELAY).")
_flag("allow_timeout_override", default=True, type=strtobool,
      help="Whether a request's `timeout` parameter may shorten --default_timeout_microseconds.")
# A model repository (kserve_sdk/repository, docs/model-repository.md): a folder of models served beside the
# script's own, loaded and unloaded under a control mode, within a memory budget.
_flag("model_repository", default=None, type=str,
      help="Serve the models of this folder (or storage URI): one folder per model with a model-settings.json "
           "(MLServer's) or numbered version folders (Triton's).")
_flag("model_control_mode", default="none", type=str.lower, choices=["none", "explicit", "poll", "lazy"],
      help="none: load every repository model at start; explicit: only the repository API loads; poll: rescan "
           "every --repository_poll_secs; lazy: a model loads on its first request.")
_flag("repository_poll_secs", default=15.0, type=float, help="Seconds between rescans of the repository (poll).")
_flag("max_loaded_models", default=0, type=non_negative_int,
      help="Repository models one worker keeps loaded; the least recently used idle one is unloaded to make room "
           "(0: no limit).")
_flag("max_model_memory_mb", default=0.0, type=float,
      help="Memory (MB) the repository models of one worker may take; idle ones are unloaded to make room "
           "(0: no limit).")
_flag("model_load_threads", default=4, type=int, help="Repository models loaded at once, each on a thread.")
# Durable jobs (kserve_sdk/jobs, docs/jobs.md): where they are kept and how each worker runs them.
_flag("jobs_store", default=DEFAULT_JOBS_STORE, type=str,
      help="Where durable jobs are kept: sqlite:///path/to/file (one file shared by the workers, made at the "
           "first submit), redis://host:port/db (shared by replicas; the redis extra), or none (jobs off).")
_flag("job_lease_seconds", default=30.0, type=float,
      help="How long a worker holds a job it runs before another may claim it (renewed while it runs).")
_flag("job_max_attempts", default=3, type=int,
      help="Times a job is claimed again after its worker stopped during it; then it is failed.")
_flag("max_pending_jobs", default=100_000, type=int,
      help="Jobs that may wait to run; one more submit is answered 503 with Retry-After (0: no limit).")
_flag("max_job_result_bytes", default=64 * 1024 * 1024, type=int,
      help="The largest answer a job keeps; a larger one makes the job failed, naming this limit (0: no limit).")
_flag("job_retention_seconds", default=86_400.0, type=float,
      help="How long a finished job and its result are kept before they are purged.")
_flag("job_callback_hosts", default="", type=str,
      help="Comma-separated host or host:port a job's callback_url may name (default: none, no callbacks).")
_flag("job_concurrency", default=4, type=int,
      help="Jobs one worker runs at once (they wait below every synchronous call in their model's queue).")
_flag("job_yield_ms", default=5.0, type=non_negative_float,
      help="After a synchronous call of a model with a queue (an instance_count) ends, its free instance waits this "
           "long for the next synchronous call before a job may take it (0: a job takes it at once).")
_flag("allow_client_shm", default=False, type=strtobool,
      help="Let clients register system shared-memory regions (/v2/systemsharedmemory) and pass tensors "
           "through them. Off by default: a client could read and write this host's shared memory.")
_flag("max_shm_regions", default=1024, type=non_negative_int,
      help="System shared-memory regions one worker keeps registered; one more is refused (0: no limit).")
_flag("shm_zero_copy", default=False, type=strtobool,
      help="Map each system shared-memory region into the server at registration, as Triton does: no copy of "
           "large tensors, but a client that shrinks its object crashes the worker (SIGBUS). Only for trusted "
           "clients (docs/security.md).")
# Security (docs/security.md): who may call which group of APIs, and client certificates.
_flag("http_restricted_api", default=None, action="append", metavar="GROUPS:KEY=VALUE",
      help="Restrict REST API groups (comma-separated: health, metadata, inference, shared-memory, model-config, "
           "model-repository, statistics, trace, logging, jobs, metrics, docs) to requests carrying the header "
           "KEY with VALUE; others are answered 403. Repeatable.")
_flag("grpc_restricted_protocol", default=None, action="append", metavar="GROUPS:KEY=VALUE",
      help="Restrict gRPC API groups (the names of --http_restricted_api) to calls carrying the metadata KEY "
           "with VALUE; others are answered PERMISSION_DENIED. Repeatable.")
_flag("ssl_ca_certs", default=None, type=str,
      help="Require client certificates signed by these CAs (PEM) on HTTPS and, with --grpc_ssl, gRPC "
           "(mutual TLS; reloaded when the file changes).")
_flag("send_timeout_seconds", default=300.0, type=float,
      help="Seconds an answer may wait for a client that does not read it before the connection is closed "
           "(0: no limit).")
_flag("body_timeout_seconds", default=300, type=float,
      help="Seconds a client may take to send a REST request body before the connection is closed.")
_flag("ssl_certfile", default=os.environ.get(KSERVE_TLS_CERT_FILE_ENV), type=str, help="Serve HTTPS with this cert.")
_flag("ssl_keyfile", default=os.environ.get(KSERVE_TLS_KEY_FILE_ENV), type=str, help="The key of --ssl_certfile.")
_flag("grpc_ssl", default=False, type=strtobool,
      help="Serve gRPC over TLS with --ssl_certfile/--ssl_keyfile (reloaded when the files change, as HTTPS is).")

args, _unknown_args = parser.parse_known_args()
if args.configure_logging and args.log_config_file:
    # A named config applies before any model code runs (the user's script builds its models
    # before it builds the server); the default config waits for ModelServer().
    configure_logging(args.log_config_file)
if args.protocol:
    args.predictor_protocol = args.protocol
# KServe's default of --protocol (v1) is set after the parse: --protocol overrides --predictor_protocol only when given.
args.protocol = args.protocol or "v1"
parser.set_defaults(protocol="v1")
# STORAGE_URI is resolved here, at import, because the user's script reads args.model_dir before it builds
# its model: a remote model is downloaded once, before any model code runs and before workers fork.
if downloads_at_start() and args.configure_logging and not args.log_config_file:
    configure_logging(None)
try:
    args.model_dir = resolve_model_dir(args.model_dir)
except StorageError as e:
    if args.configure_logging and not args.log_config_file:
        configure_logging(None)
    logger.error("Model storage: %s", e)
    sys.exit(1)
parser.set_defaults(model_dir=args.model_dir)  # scripts parsing with parents=[parser] see the same directory


def _apply_batching_flags(model: BaseKServeModel) -> None:
    """--max_batch_size / --max_batch_latency_ms configure the model named by --model_name, unless its
    code chose its own."""
    if model.name != args.model_name:
        return
    if args.max_batch_size and not getattr(model, "max_batch_size", None):
        model.max_batch_size = args.max_batch_size
    if args.max_batch_latency_ms is not None:
        model.max_latency_ms = args.max_batch_latency_ms


def scheduling_defaults(flags: argparse.Namespace) -> SchedulingPolicy:
    """The server's default scheduling policy, from its flags."""
    return SchedulingPolicy.from_mapping({name: getattr(flags, name) for name in SCHEDULING_FIELDS})


def job_options(flags: argparse.Namespace) -> JobOptions:
    """The server's durable-jobs options, from its flags (checked by ``JobOptions.check``)."""
    store = flags.jobs_store.strip()
    hosts = frozenset(host.strip().lower() for host in flags.job_callback_hosts.split(",") if host.strip())
    return JobOptions(None if store.lower() in ("", "none") else store, flags.job_lease_seconds,
                      flags.job_max_attempts, flags.max_pending_jobs, flags.max_job_result_bytes,
                      flags.job_retention_seconds, hosts, flags.job_concurrency)


if TYPE_CHECKING:  # imported by the property that returns it, when used
    from .protocol.model_repository_extension import ModelRepositoryExtension

#: A function ModelServer.route registers (returned unchanged).
RouteFunction = TypeVar("RouteFunction", bound=Callable[..., Any])
#: What register_exception_handler takes: handler(loop, context), asyncio's exception-handler signature.
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, Dict[str, Any]], None]


def _current_loop() -> asyncio.AbstractEventLoop:
    """The running loop; outside one (a user calling a setup method early), the loop asyncio would hand out."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.get_event_loop_policy().get_event_loop()


def loop_factory(event_loop: str) -> Optional[Callable[[], asyncio.AbstractEventLoop]]:
    """What makes the event loop ``--event-loop`` names (None: asyncio's own). ``auto`` takes uvloop when it
    is installed; ``uvloop`` without it installed is an error that says so."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if event_loop == "uvloop":
            raise RuntimeError("--event-loop uvloop needs the uvloop package: pip install 'kserve-sdk[uvloop]'") \
                from None
        return None
    return uvloop.new_event_loop


#: The REST APIs the server serves (handlers/api.py), in order: the first route matching a path answers it.
#: Triton's extensions come before v2, whose model metadata would take ``/v2/models/stats``; OpenAI after
#: v1, which keeps ``/v1/models`` under an empty ``KSERVE_OPENAI_ROUTE_PREFIX``. A script serves an API of
#: its own by adding it before ``ModelServer().start``: ``model_server.REST_APIS.append(MY_API)``.
REST_APIS: List[RestAPI] = [server_api.API, v1_api.API, triton_api.API, v2_api.API, jobs_api.API,
                            streams_api.API, timeseries_api.API, openai_api.API, docs_api.API]


#: Bytes Tornado reads from a connection at a time. Each read zeroes a fresh buffer of this size, and a
#: request takes two reads (its bytes, then the one that finds the socket empty): Tornado's 64 KiB made
#: that 128 KiB of memory written per small request (what it cost: docs/performance.md). 16 KiB holds a
#: small request whole; a large body takes four times as many reads, which its JSON decoding outweighs.
READ_CHUNK_BYTES = 16 * 1024


class ModelServer:
    """Serves models over KServe v1 REST, Open Inference Protocol v2 REST and gRPC.

    Every argument defaults to its command-line flag, so ``ModelServer().start([model])`` honours
    ``--http_port``, ``--workers`` and the rest.
    """

    def __init__(
        self,
        http_port: int = args.http_port,
        grpc_port: int = args.grpc_port,
        workers: int = args.workers,
        max_threads: int = args.max_threads,
        max_asyncio_workers: Optional[int] = args.max_asyncio_workers,
        registered_models: Optional[ModelRepository] = None,
        enable_grpc: bool = args.enable_grpc,
        enable_docs_url: bool = args.enable_docs_url,
        enable_latency_logging: bool = args.enable_latency_logging,
        access_log_format: Optional[str] = args.access_log_format,
        event_loop: str = args.event_loop,
        timeout_keep_alive: int = args.timeout_keep_alive,
        grace_period: int = args.grace_period,
        predictor_config: Optional[PredictorConfig] = None,
        ssl_certfile: Optional[str] = args.ssl_certfile,
        ssl_keyfile: Optional[str] = args.ssl_keyfile,
        max_body_size: int = args.max_body_size,
    ):
        if args.configure_logging and not args.log_config_file:
            configure_logging(None)
        self.registered_models = registered_models if registered_models is not None else ModelRepository()
        if ssl_certfile and ssl_keyfile and http_port == DEFAULT_HTTP_PORT:
            http_port = DEFAULT_HTTPS_PORT
        self.http_port = http_port
        self.grpc_port = grpc_port
        self.workers = workers
        self.max_threads = max_threads
        self.max_asyncio_workers = max_asyncio_workers or min(32, cpu_count() + 4)
        self.enable_grpc = enable_grpc
        self.enable_docs_url = enable_docs_url
        self.enable_latency_logging = enable_latency_logging
        self.access_log_format = access_log_format
        self.event_loop = event_loop
        self.timeout_keep_alive = timeout_keep_alive
        self.grace_period = grace_period
        self.ssl_certfile, self.ssl_keyfile = ssl_certfile, ssl_keyfile
        self.max_body_size = max_body_size
        self.grpc_max_send_message_length = args.grpc_max_send_message_length
        self.grpc_max_receive_message_length = args.grpc_max_receive_message_length
        context.set_predictor_config(predictor_config or PredictorConfig(
            args.predictor_host, args.predictor_protocol, args.predictor_use_ssl,
            args.predictor_request_timeout_seconds, args.predictor_request_retries,
            args.enable_predictor_health_check))
        self.dataplane = DataPlane(self.registered_models, enable_latency_logging, args.max_concurrent_requests,
                                   args.request_timeout_seconds, args.allow_client_shm, scheduling_defaults(args))
        self.dataplane.scheduler.background_yield = args.job_yield_ms / 1000.0
        self.dataplane.shared_memory.max_regions = args.max_shm_regions
        self.dataplane.shared_memory.zero_copy = args.shm_zero_copy
        #: Durable jobs (the ``--jobs_store`` and ``--job_*`` flags); ``store_url`` None turns them off.
        self.job_options = job_options(args)
        self._stopping: Optional[asyncio.Event] = None
        #: KServe's ``servers``: awaitables (coroutines) that ``start`` runs on the server's event loop beside REST
        #: and gRPC, in every worker, cancelled when the server stops; one that fails stops the server and
        #: ``start`` raises its error.
        self.servers: List[Awaitable[Any]] = []
        self._servers_failure: Optional[BaseException] = None
        self._routes = CustomRoutes()  # what add_route and route add
        self._custom_exception_handler: Optional[ExceptionHandler] = None
        self._tls: Optional[CertificatePair] = None  # the HTTPS/gRPC pair, loaded by start()
        self._security = Security()  # the restricted API groups (--http_restricted_api, ...), parsed by start()

    def register_model(self, model: BaseKServeModel, name: Optional[str] = None) -> None:
        """Serve ``model`` under ``name`` (default: its own name); a second name serves it twice."""
        if not model.name:
            raise ValueError("Failed to register model, model.name must be provided.")
        self.registered_models.update(model, name or model.name)
        logger.info("Registering model: %s", name or model.name)

    def add_route(self, path: str, handler: Union[Callable[..., Any], type],
                  methods: Optional[Sequence[str]] = None, name: Optional[str] = None) -> None:
        """Serve a route of your own on the REST port (call it before ``start``), as KServe scripts add one to
        ``kserve.model_server.app``. ``path`` is a Tornado pattern (a regular expression matched against the
        whole path; its groups are passed on). ``handler`` is a function, async or plain (run in the thread
        pool), called with no arguments or with a :class:`~kserve_sdk.handlers.custom_routes.RouteRequest`
        then one argument per group, whose return value is answered as JSON (bytes as they are; a
        ``RouteResponse`` sets the status, headers and content type) for the ``methods`` given (default GET);
        or a :class:`~kserve_sdk.handlers.base.BaseHandler` subclass. ``name`` labels its calls in metrics
        and the access log (default: the function's or class's name). Its calls have the lifecycle of every
        route: request id, access log, metrics, ``{"error": ...}`` answers, and the drain of a stopping server."""
        self._routes.add(path, handler, methods, name)

    def route(self, path: str, methods: Optional[Sequence[str]] = None,
              name: Optional[str] = None) -> Callable[[RouteFunction], RouteFunction]:
        """``@server.route("/path", methods=["GET"])`` on a function: :meth:`add_route` as a decorator."""
        def register(function: RouteFunction) -> RouteFunction:
            self.add_route(path, function, methods, name)
            return function
        return register

    def start(self, models: List[BaseKServeModel]) -> None:
        """Serve ``models`` until SIGTERM/SIGINT. Models not ready now are left out (logged); with none
        ready the server logs why and exits with status 1 without serving.

        With ``--workers N`` (N > 1) this process binds the HTTP port, forks N workers that each serve
        REST and gRPC with their own event loop, restarts a worker that dies, and on SIGTERM drains them all.
        """
        try:
            self._register_ready(models)
            if args.model_repository:  # read once, before workers fork; each worker loads its own models
                self.dataplane.open_repository(RepositoryOptions.from_flags(args))
            warn_near_misses(_unknown_args, parser)
            self._check_startup()
        except (NoModelReady, StartupFailure, ValueError) as e:  # ValueError: a model's bad warm-up list
            logger.error("%s", e)
            sys.exit(1)
        metrics.setup()
        # What exists now (modules, models, weights) lives as long as the server: keep it out of the
        # collector's generations, so collections only walk what requests allocate (less CPU per small
        # request: docs/performance.md) and forked workers do not copy pages just for the collector to visit.
        gc.freeze()
        try:
            if self.workers > 1:
                import shutil
                import tempfile

                from .server.workers import Supervisor

                sockets = self._bind_http()
                control_dir = tempfile.mkdtemp(prefix="kserve-sdk-control-")
                try:
                    Supervisor(self.workers, lambda: self._run(self._serve(sockets, True, control_dir)),
                               self.grace_period, control_dir).run()
                finally:
                    shutil.rmtree(control_dir, ignore_errors=True)
                    for awaitable in self.servers:  # the workers ran their copies; this process never will
                        getattr(awaitable, "close", lambda: None)()
            else:
                self._run(self._serve())
        except StartupFailure as e:
            logger.error("%s", e)
            sys.exit(1)
        finally:
            metrics.cleanup()

    def _check_startup(self) -> None:
        """Find what would stop the server before it starts (and before workers fork), so it is told once:
        TLS flags that do not go together or a pair that does not load, a gRPC port that is taken."""
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise StartupFailure("--ssl_certfile and --ssl_keyfile (KSERVE_TLS_CERT_FILE, KSERVE_TLS_KEY_FILE) "
                                 "go together: HTTPS needs both")
        if args.grpc_ssl and not self.ssl_certfile:
            raise StartupFailure("--grpc_ssl needs --ssl_certfile and --ssl_keyfile")
        if self.ssl_certfile:
            try:
                self._tls = CertificatePair(self.ssl_certfile, self.ssl_keyfile, args.ssl_ca_certs)
            except TLSError as e:
                raise StartupFailure(str(e)) from None
        if args.ssl_ca_certs and not self.ssl_certfile:
            raise StartupFailure("--ssl_ca_certs (client certificates) needs --ssl_certfile and --ssl_keyfile")
        try:
            self._security = Security.from_flags(args)
        except ValueError as e:
            raise StartupFailure(str(e)) from None
        self._check_scheduling()
        try:
            self.job_options.check()
        except ValueError as e:
            raise StartupFailure(str(e)) from None
        for awaitable in self.servers:
            if not inspect.isawaitable(awaitable):
                raise StartupFailure(f"ModelServer.servers holds {awaitable!r}, which is not awaitable: add a "
                                     "coroutine (my_task(), not my_task)")
        if self.enable_grpc:
            if self.grpc_port == self.http_port:
                raise StartupFailure(f"--grpc_port and --http_port are both {self.http_port}: "
                                     "give them different ports")
            check_port_free("--grpc_port", self.grpc_port)

    def _check_scheduling(self) -> None:
        """Each served model's scheduling policy, merged over the flags', holds together (a default priority
        within the levels, known fields, known values)."""
        scheduler = self.dataplane.scheduler
        try:
            SchedulingPolicy().over(scheduler.defaults)
        except ValueError as e:
            raise StartupFailure(f"scheduling flags: {e}") from None
        for name, model in self.registered_models.get_models().items():
            try:
                scheduler.policy_of(name, model)
            except (ValueError, TypeError) as e:
                raise StartupFailure(f"model '{name}': {e}") from None

    def _bind_http(self) -> List[socket.socket]:
        try:
            return bind_sockets(self.http_port)
        except OSError as e:
            raise bind_failure("--http_port", self.http_port, e) from None

    def _run(self, main: Coroutine[Any, Any, None]) -> None:
        """Run ``main`` on the event loop ``--event-loop`` chose."""
        with asyncio.Runner(loop_factory=loop_factory(self.event_loop)) as runner:
            runner.run(main)

    def _register_ready(self, models: List[BaseKServeModel]) -> None:
        if not isinstance(models, list):
            raise RuntimeError("Unknown model collection type")
        any_ready = False
        for model in models:
            if not isinstance(model, BaseKServeModel):
                raise RuntimeError("Model type should be 'BaseKServeModel'")
            if model.ready:
                any_ready = True
                self.register_model(model)
                model.enable_latency_logging = self.enable_latency_logging
                _apply_batching_flags(model)
            else:
                logger.warning("Model with name %s is not ready; it is not served.", model.name)
        if models and not any_ready:
            raise NoModelReady(models)

    async def _serve(self, sockets: Optional[List[socket.socket]] = None, reuse_port: bool = False,
                     control_dir: str = "") -> None:
        loop = asyncio.get_running_loop()
        tracing.setup()  # here, after a worker's fork: each worker exports from its own thread
        self.setup_event_loop()
        executor.configure(self.max_asyncio_workers, args.inline_sync_below_ms)
        self._stopping = asyncio.Event()
        self.register_signal_handler()
        for model in self.registered_models.get_models().values():
            model.start()
            if model.engine:
                await model.start_engine()
        if control_dir:
            await self._share_changes(control_dir)
        jobs = None
        if self.job_options.store_url is not None:  # before the API can be asked about jobs
            jobs = jobs_service.JobsService(self.dataplane, self.job_options)
        jobs_service.install(jobs)
        self._start_http(sockets)
        if self._tls is not None:
            self._tls_watch = asyncio.ensure_future(self._tls.watch())
        if self.enable_grpc:
            await self._start_grpc(reuse_port)
        logger.info("Serving HTTP on port %d%s (event loop: %s)", self.http_port,
                    f" and gRPC on port {self.grpc_port}" if self.enable_grpc else "",
                    type(loop).__module__.split(".")[0])
        start_warmups(self.dataplane)  # in the background: the server answers meanwhile, the models not ready
        self.dataplane.start_repository()  # the same: the repository's models load as its control mode says
        if jobs is not None:
            await jobs.start()  # a job of a model still warming up waits for it
        tasks = self._start_servers()
        await self._stopping.wait()
        await self._shutdown()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._servers_failure is not None:
            raise self._servers_failure

    def _start_servers(self) -> List["asyncio.Task[Any]"]:
        """Run each awaitable of ``servers`` on this loop; the first that fails stops the server."""
        def finished(task: "asyncio.Task[Any]") -> None:
            if not task.cancelled() and task.exception() is not None and self._servers_failure is None:
                self._servers_failure = task.exception()
                logger.error("an awaitable of ModelServer.servers failed (%r): stopping", self._servers_failure)
                self.stop()

        tasks = [asyncio.ensure_future(awaitable) for awaitable in self.servers]
        for task in tasks:
            task.add_done_callback(finished)
        return tasks

    async def _share_changes(self, control_dir: str) -> None:
        """With workers: replay the changes made so far (model loads, shared-memory regions), apply
        siblings' changes when signalled, and pass this worker's changes on (waiting until every worker
        has them)."""
        from .server.workers import ControlChannel

        channel = ControlChannel(control_dir)
        # The handler first: a change published from now on is signalled to it, and one published before is
        # in the log the replay below reads (a worker starting while a sibling publishes misses neither).
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, channel.signalled(self.dataplane.apply_change))
        await channel.catch_up(self.dataplane.apply_change)
        self.dataplane.share_change = channel.share

    def _start_http(self, sockets: Optional[List[socket.socket]]) -> None:
        ssl_options = self._tls.context if self._tls is not None else None
        app = make_app(self.dataplane, REST_APIS + self._routes.apis(), access_log_format=self.access_log_format,
                       enable_docs_url=self.enable_docs_url, enable_gzip=args.enable_gzip,
                       max_body_size=self.max_body_size)
        self._security.protect_app(app)
        # idle_connection_timeout is also Tornado's header timeout: a client sending headers slowly is dropped.
        server = HTTPServerWithLimits(app, ssl_options=ssl_options, max_body_size=self.max_body_size,
                                      idle_connection_timeout=self.timeout_keep_alive, decompress_request=True,
                                      body_timeout=args.body_timeout_seconds or None, chunk_size=READ_CHUNK_BYTES,
                                      send_timeout=args.send_timeout_seconds or None)
        if sockets is None:
            server.add_sockets(self._bind_http())
        else:
            from .internals.tornado_accept import accept_balanced

            accept_balanced(server, sockets, self.dataplane.calls_in_flight)
        self._http_server = server

    async def _start_grpc(self, reuse_port: bool) -> None:
        from .handlers.grpc import start_grpc_server

        try:
            self._grpc_server = await start_grpc_server(
                self.dataplane, self.grpc_port, self.max_threads,
                self.grpc_max_send_message_length, self.grpc_max_receive_message_length, reuse_port,
                self._tls.grpc_credentials() if args.grpc_ssl else None,
                self._security.grpc_methods(self.dataplane))
        except RuntimeError:  # grpc's "Failed to bind": taken since start() checked it?
            if not reuse_port:  # (with workers, siblings hold the port)
                check_port_free("--grpc_port", self.grpc_port)
            raise

    def register_exception_handler(self, handler: ExceptionHandler) -> None:
        """Use ``handler(loop, context)`` as the event loop's exception handler (asyncio's
        ``loop.set_exception_handler``): it is called with the loop and asyncio's context dict (``message``,
        ``exception``, ...) for errors nothing else catches, such as a failing callback. Call it before
        ``start``; ``default_exception_handler`` is what it replaces, and a handler may call it."""
        self._custom_exception_handler = handler

    def default_exception_handler(self, loop: asyncio.AbstractEventLoop, context: Dict[str, Any]) -> None:
        """The event loop's exception handler unless one is registered: log the error, then let asyncio's
        own handler log it with its traceback."""
        if "exception" in context:
            logger.error("Caught exception: %s", context.get("exception"))
        logger.error("message: %s", context.get("message"))
        loop.default_exception_handler(context)

    def setup_event_loop(self) -> None:
        """Set up the server's event loop: the registered (or default) exception handler and a thread pool
        of ``max_asyncio_workers`` threads for synchronous model code. ``start`` calls it on its loop."""
        loop = _current_loop()
        loop.set_exception_handler(self._custom_exception_handler or self.default_exception_handler)
        loop.set_default_executor(ThreadPoolExecutor(max_workers=self.max_asyncio_workers,
                                                     thread_name_prefix="default"))

    def register_signal_handler(self) -> None:
        """Make SIGTERM, SIGINT and SIGQUIT call ``stop`` (a graceful drain). ``start`` calls it on its loop."""
        loop = _current_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            loop.add_signal_handler(sig, self.stop, sig)

    @property
    def model_repository_extension(self) -> "ModelRepositoryExtension":
        """KServe's model repository extension (``index`` / ``load`` / ``unload``) over this server's models."""
        from .protocol.model_repository_extension import ModelRepositoryExtension

        return ModelRepositoryExtension(self.registered_models)

    def stop(self, sig: Optional[int] = None) -> None:
        """Begin a graceful stop: refuse new inference calls, let those in flight finish, then exit."""
        logger.info("Stopping the model server (signal %s)", sig)
        self.dataplane.draining = True
        if self._stopping is not None:
            self._stopping.set()

    async def _drain(self) -> bool:
        """Wait up to ``grace_period`` for the calls in flight, jobs among them: running jobs get the grace
        period less a second to finish, then go back to pending, so their model calls end within it."""
        jobs = jobs_service.current()
        if jobs is None:
            return await self.dataplane.drain(self.grace_period)
        job_grace = max(self.grace_period - 1.0, self.grace_period * 0.8)
        drained, _ = await asyncio.gather(self.dataplane.drain(self.grace_period), jobs.stop(job_grace))
        return drained

    async def _shutdown(self) -> None:
        """Drain, then stop: readiness turns false and new inference calls are refused at once, while the
        listeners stay open (so probes see 503); calls in flight get ``grace_period`` seconds to finish."""
        from .clients.pool import close_clients

        if not await self._drain():
            logger.warning("requests still in flight after the %ss grace period; stopping anyway", self.grace_period)
        self._http_server.stop()
        grpc_server = getattr(self, "_grpc_server", None)
        if grpc_server is not None:
            await grpc_server.stop(1)
        try:
            await asyncio.wait_for(self._http_server.close_all_connections(), 5)
        except TimeoutError:
            logger.warning("HTTP connections still open after the drain; closing")
        await close_clients()
        for name in list(self.registered_models.get_models()):
            self.registered_models.unload(name)
        tracing.shutdown()  # the spans still buffered are exported
        flush_pending()  # the access and latency lines of the last answers, before the line that ends the log
        logger.info("Model server stopped")
