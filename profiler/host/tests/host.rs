//! The real skillhost, started on an ephemeral loopback port, serving the real sample
//! skills: every route, every failure path, both allocators, concurrency and shutdown.

mod common;

use std::time::Duration;

use common::TestHost;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use skillprof::record::profile::SkillWorld;

fn input(topic: &str, memory_kb: u64, wait_ms: u64) -> Value {
    json!({ "topic": topic, "memory": memory_kb, "wait_time": wait_ms })
}

async fn status_of(host: &TestHost, name: &str) -> Value {
    host.client()
        .get_json(&format!("/skills/{name}"))
        .await
        .unwrap()
}

/// Executes and returns the JSON answer, failing with the host's message otherwise.
async fn run_ok(host: &TestHost, skill: &str, input: &Value) -> Value {
    let reply = host.client().execute(skill, input).await.unwrap();
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{skill}: {}\n{}",
        reply.text(),
        host.log()
    );
    reply.json().unwrap()
}

async fn run_failing(host: &TestHost, skill: &str, input: &Value, status: StatusCode) -> String {
    let reply = host.client().execute(skill, input).await.unwrap();
    assert_eq!(reply.status, status, "{skill}: {}", reply.text());
    reply.error_message()
}

/// The host still serves after a failure.
async fn assert_healthy(host: &TestHost) {
    assert!(
        host.client().healthy().await,
        "host unhealthy:\n{}",
        host.log()
    );
    let answer = run_ok(host, "hello", &json!({"topic": "again"})).await;
    assert_eq!(answer["greeting"], "Hello, again!");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_with_both_sample_skills() {
    let host = TestHost::start(&[]).await;
    host.add("sample_rs1", "sample_rs").await;
    host.add("sample_py1", "sample_py").await;
    host.add("hello", "hello").await;

    assert_eq!(
        host.client().skills().await.unwrap(),
        ["hello", "sample_py1", "sample_rs1"]
    );
    assert!(
        host.client().cached_skills().await.unwrap().is_empty(),
        "compilation is lazy"
    );
    assert_eq!(status_of(&host, "sample_py1").await["state"], "registered");

    for skill in ["sample_rs1", "sample_py1"] {
        let answer = run_ok(&host, skill, &input("Alice", 1000, 20)).await;
        let greeting = answer["greeting"].as_str().unwrap();
        assert!(greeting.contains("Alice"), "{greeting}");
        let chunks = answer["chunks"].as_u64().unwrap();
        // 1000 KB in chunks of 100..=300 KB.
        assert!((4..=10).contains(&chunks), "{skill}: {chunks} chunks");
    }
    assert_eq!(
        host.client().cached_skills().await.unwrap(),
        ["sample_py1", "sample_rs1"]
    );
    let status = status_of(&host, "sample_rs1").await;
    assert_eq!(status["state"], "compiled");
    assert_eq!(status["origin"], "compiled");

    let metrics = host.metrics().await;
    assert_eq!(metrics["compiled_skills"], 2);
    assert_eq!(metrics["registered_skills"], 3);
    assert_eq!(metrics["instances_live"], 0);
    assert_eq!(metrics["requests_ok"], 2);
    assert_eq!(metrics["allocator"], "on-demand");
    assert!(metrics.get("pooling").is_none());
    // The same figures in the text a Prometheus scrape reads.
    let scraped = host.prometheus_samples().await;
    assert_eq!(
        scraped["skillhost_requests_total{status=200}"], 2.0,
        "{scraped}"
    );
    assert_eq!(scraped["skillhost_compilations_total{}"], 2.0, "{scraped}");
    assert_eq!(scraped["skillhost_instances_total{}"], 2.0, "{scraped}");
    assert_eq!(scraped["skillhost_instances_live{}"], 0.0, "{scraped}");
    assert_eq!(
        scraped["skillhost_skills{state=registered}"], 3.0,
        "{scraped}"
    );
    assert_eq!(
        scraped["skillhost_skills{state=compiled}"], 2.0,
        "{scraped}"
    );
    assert_eq!(
        scraped["skillhost_request_duration_seconds_count{}"], 2.0,
        "{scraped}"
    );
    assert_eq!(
        scraped["skillhost_compile_duration_seconds_count{}"], 2.0,
        "{scraped}"
    );
    // malloc's own view of the heap (mallinfo2): what it has handed out is resident or
    // swapped, so at most the host's RSS; after a Python compile it keeps freed memory too.
    let rss_bytes =
        skillprof::producers::sample::process::read(std::path::Path::new("/proc"), host.host.pid())
            .unwrap()
            .rss_kb as f64
            * 1024.0;
    let in_use = scraped["skillhost_heap_in_use_bytes{}"].as_f64().unwrap();
    let free = scraped["skillhost_heap_free_bytes{}"].as_f64().unwrap();
    assert!(in_use > 0.0 && in_use <= rss_bytes, "{scraped}");
    assert!(free > 0.0, "{scraped}");
    assert!(
        metrics["heap"]["in_use_bytes"].as_u64().is_some(),
        "{metrics}"
    );

    // Eviction, then re-compilation on the next request.
    let evicted: Value = host
        .client()
        .drop_cached("sample_rs1")
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(evicted, json!({"skill": "sample_rs1", "evicted": true}));
    assert_eq!(host.client().cached_skills().await.unwrap(), ["sample_py1"]);
    let again: Value = host
        .client()
        .drop_cached("sample_rs1")
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(again["evicted"], false);
    run_ok(&host, "sample_rs1", &input("Bob", 0, 0)).await;
    assert_eq!(host.metrics().await["compilations"], 3);

    // chunk_kb fixes the chunks' size: one chunk of the whole (the 2024 study's single-chunk
    // twin of mem_chunks_2), or 250s, or 300s and the remainder.
    for skill in ["sample_rs1", "sample_py1"] {
        for (chunk_kb, expected) in [(1000, 1), (250, 4), (300, 4)] {
            let asked = json!({ "memory": 1000, "chunk_kb": chunk_kb });
            let answer = run_ok(&host, skill, &asked).await;
            assert_eq!(answer["chunks"], expected, "{skill} {asked}: {answer}");
        }
    }

    // Removing the file unregisters the skill.
    assert!(host.skills.remove("sample_rs1").unwrap());
    host.client()
        .wait_until_unlisted("sample_rs1", Duration::from_secs(10))
        .await
        .unwrap();
    let message = run_failing(
        &host,
        "sample_rs1",
        &input("x", 0, 0),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(message.contains("unknown skill"), "{message}");

    let health = host
        .client()
        .send(Method::GET, "/healthcheck", None)
        .await
        .unwrap();
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_wasm_fails_alone_and_shows_why() {
    let host = TestHost::start(&[]).await;
    host.skills
        .add_bytes("broken", b"\0asm this is not a component")
        .unwrap();
    host.add("hello", "hello").await;

    let message = run_failing(
        &host,
        "broken",
        &json!({}),
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
    assert!(message.contains("failed to compile"), "{message}");
    let status = status_of(&host, "broken").await;
    assert_eq!(status["state"], "failed");
    assert!(!status["error"].as_str().unwrap().is_empty());
    assert_eq!(host.metrics().await["failed_skills"], 1);
    assert_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trap_or_skill_error_is_a_500_and_the_host_stays_healthy() {
    let host = TestHost::start(&[]).await;
    host.add("trap", "trap").await;
    host.add("hello", "hello").await;

    let trapped = run_failing(&host, "trap", &json!({}), StatusCode::INTERNAL_SERVER_ERROR).await;
    assert!(trapped.contains("unreachable"), "{trapped}");
    let internal = run_failing(
        &host,
        "trap",
        &json!({"mode": "error"}),
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
    assert!(internal.contains("internal error"), "{internal}");
    let invalid = run_failing(
        &host,
        "trap",
        &json!({"mode": "invalid"}),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(invalid.contains("rejected its input"), "{invalid}");
    assert_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_over_its_memory_limit_gets_a_clear_500() {
    let host = TestHost::start(&["--memory-limit-mib", "32"]).await;
    host.add("sample_rs1", "sample_rs").await;
    host.add("hello", "hello").await;

    run_ok(&host, "sample_rs1", &input("fits", 10_000, 0)).await;
    let message = run_failing(
        &host,
        "sample_rs1",
        &input("big", 100_000, 0),
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
    assert!(
        message.contains("refused memory growth: limit 32 MiB"),
        "{message}"
    );
    assert_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_past_their_deadline_are_stopped() {
    let host = TestHost::start(&["--deadline-ms", "300"]).await;
    host.add("sample_rs1", "sample_rs").await;
    host.add("trap", "trap").await;
    host.add("hello", "hello").await;

    // Asleep in WASI, and busy in guest code: both are stopped.
    let asleep = run_failing(
        &host,
        "sample_rs1",
        &input("late", 0, 60_000),
        StatusCode::GATEWAY_TIMEOUT,
    )
    .await;
    assert!(asleep.contains("deadline of 300 ms"), "{asleep}");
    let busy = run_failing(
        &host,
        "trap",
        &json!({"mode": "loop"}),
        StatusCode::GATEWAY_TIMEOUT,
    )
    .await;
    assert!(busy.contains("deadline"), "{busy}");
    assert_eq!(
        host.metrics().await["instances_live"],
        0,
        "timed-out instances are dropped"
    );
    assert_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_json_and_bad_names_are_400() {
    let host = TestHost::start(&[]).await;
    host.add("hello", "hello").await;
    let client = host.client();

    let not_json = client
        .send(Method::POST, "/execute_skill", Some(b"{not json".to_vec()))
        .await
        .unwrap();
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    assert!(not_json.error_message().contains("invalid request body"));
    let no_skill = client
        .send(
            Method::POST,
            "/execute_skill",
            Some(br#"{"input": {}}"#.to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(no_skill.status, StatusCode::BAD_REQUEST);

    for name in ["../hello", "hello.wasm", "a/b", "", "x y"] {
        let message = run_failing(&host, name, &json!({}), StatusCode::BAD_REQUEST).await;
        assert!(message.contains("skill name"), "{name:?}: {message}");
    }
    let unknown = run_failing(&host, "nope", &json!({}), StatusCode::BAD_REQUEST).await;
    assert!(unknown.contains("unknown skill 'nope'"), "{unknown}");

    let evict_unknown = client.drop_cached("nope").await.unwrap();
    assert_eq!(evict_unknown.status, StatusCode::NOT_FOUND);
    let evict_bad = client.drop_cached("..").await.unwrap();
    assert_eq!(evict_bad.status, StatusCode::BAD_REQUEST);
    let status_bad = client.send(Method::GET, "/skills/a.b", None).await.unwrap();
    assert_eq!(status_bad.status, StatusCode::BAD_REQUEST);

    // `input` may be left out: the skill gets `{}`.
    let no_input = client
        .send(
            Method::POST,
            "/execute_skill",
            Some(br#"{"skill": "hello"}"#.to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(no_input.status, StatusCode::OK, "{}", no_input.text());
    assert_eq!(
        no_input.json::<Value>().unwrap()["greeting"],
        "Hello, world!"
    );
    assert_healthy(&host).await;
}

/// The 2024 kind of Python skill: the same work as sample_py, its input validated by pydantic
/// (native pydantic-core compiled to WASI), so wrong input is pydantic's error, a 400.
#[tokio::test(flavor = "multi_thread")]
async fn the_pydantic_sample_does_sample_pys_work_and_validates_with_pydantic() {
    let host = TestHost::start(&[]).await;
    host.add("sample_py1", "sample_py_pydantic").await;
    host.add("hello", "hello").await;
    let answer = run_ok(&host, "sample_py1", &input("Alice", 1000, 20)).await;
    assert_eq!(answer["greeting"], "Hello Alice, from sample_py_pydantic");
    assert!(
        (4..=10).contains(&answer["chunks"].as_u64().unwrap()),
        "{answer}"
    );
    assert_eq!(answer["memory_kb"], 1000);
    assert_eq!(answer["wait_ms"], 20);
    let one = run_ok(
        &host,
        "sample_py1",
        &json!({"memory": 1000, "chunk_kb": 1000}),
    )
    .await;
    assert_eq!(one["chunks"], 1, "{one}");
    let defaults = run_ok(&host, "sample_py1", &json!({"extra": 1})).await;
    assert_eq!(defaults["greeting"], "Hello world, from sample_py_pydantic");
    for (bad, field) in [
        (json!({"memory": true}), "memory"),
        (json!({"memory": -1}), "memory"),
        (json!({"wait_time": "5"}), "wait_time"),
        (json!({"topic": 3}), "topic"),
        (json!({"chunk_kb": -1}), "chunk_kb"),
        (json!([1, 2]), "Input should be an object"),
    ] {
        let why = run_failing(&host, "sample_py1", &bad, StatusCode::BAD_REQUEST).await;
        assert!(
            why.contains("validation error for Input") && why.contains(field),
            "{bad}: {why}"
        );
    }
    assert_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pooling_allocator_serves_both_samples_and_reports_its_pool() {
    let host = TestHost::start(&["--allocator", "pooling", "--pool-instances", "50"]).await;
    host.add("sample_rs1", "sample_rs").await;
    host.add("sample_py1", "sample_py").await;
    for skill in ["sample_rs1", "sample_py1"] {
        for round in 0..3 {
            run_ok(&host, skill, &input(&format!("round {round}"), 500, 0)).await;
        }
    }
    let metrics = host.metrics().await;
    assert_eq!(metrics["allocator"], "pooling");
    assert_eq!(
        metrics["max_concurrent_requests"], 50,
        "capped at the pool size"
    );
    let pool = &metrics["pooling"];
    assert_eq!(pool["component_instances"], 0, "no request is running");
    assert!(
        pool["unused_warm_memories"].as_u64().unwrap() >= 1,
        "{pool}"
    );
}

/// `--malloc jemalloc` runs the host again with the system's jemalloc preloaded, under the
/// same pid; its own figures then come from jemalloc. A host whose allocator is not the one
/// its flags name refuses to start.
#[tokio::test(flavor = "multi_thread")]
async fn jemalloc_takes_the_heap_when_asked_and_nothing_else_does() {
    let host = TestHost::start(&[
        "--malloc",
        "jemalloc",
        "--malloc-decay-ms",
        "0",
        "--trim-after-compile",
    ])
    .await;
    let pid = host.host.pid();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("/libjemalloc.so.2"), "{}", host.log());
    let config: Value = host.client().get_json("/config").await.unwrap();
    assert_eq!(config["compiling"]["malloc"], "jemalloc", "{config}");
    assert_eq!(config["compiling"]["malloc_decay_ms"], 0, "{config}");
    host.add("sample_py1", "sample_py").await;
    run_ok(&host, "sample_py1", &input("Alice", 1000, 0)).await;
    let scraped = host.prometheus_samples().await;
    let rss_bytes = skillprof::producers::sample::process::read(std::path::Path::new("/proc"), pid)
        .unwrap()
        .rss_kb as f64
        * 1024.0;
    let in_use = scraped["skillhost_heap_in_use_bytes{}"].as_f64().unwrap();
    let free = scraped["skillhost_heap_free_bytes{}"].as_f64().unwrap();
    assert!(in_use > 0.0 && in_use + free <= rss_bytes, "{scraped}");

    let dir = tempfile::tempdir().unwrap();
    let refused = |env: &[(&str, &str)], flags: &[&str], why: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_skillhost"))
            .args(["--skills-dir", dir.path().to_str().unwrap(), "--port", "0"])
            .args(flags)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(why), "{why}: {stderr}");
    };
    refused(&[], &["--malloc-decay-ms", "0"], "pass --malloc jemalloc");
    refused(
        &[("LD_PRELOAD", "libjemalloc.so.2")],
        &[],
        "jemalloc is preloaded",
    );
}

/// After a compile, glibc keeps what Cranelift freed; `POST /admin/trim` hands it back, and
/// the host's RSS falls by it. The answer carries malloc's figures around the trim.
#[tokio::test(flavor = "multi_thread")]
async fn the_trim_route_gives_back_what_malloc_kept_after_a_compile() {
    let host = TestHost::start(&[]).await;
    host.add("sample_py1", "sample_py").await;
    run_ok(&host, "sample_py1", &input("Alice", 1000, 0)).await;
    let rss_kb = || {
        skillprof::producers::sample::process::read(std::path::Path::new("/proc"), host.host.pid())
            .unwrap()
            .rss_kb
    };
    let before = rss_kb();
    let reply = host
        .client()
        .send(Method::POST, "/admin/trim", None)
        .await
        .unwrap();
    assert!(reply.is_ok(), "{}", reply.text());
    let after = rss_kb();
    assert!(
        before - after > 50 * 1024,
        "the trim took RSS from {before} KB to {after} KB\n{}",
        host.log()
    );
    let figures: Value = reply.json().unwrap();
    for when in ["before", "after"] {
        assert!(
            figures[when]["in_use_bytes"].as_u64().unwrap() > 0,
            "{figures}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn disk_cache_is_reused_by_the_next_host() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    for expected in ["compiled", "disk_cache"] {
        let host = TestHost::start(&["--cache-dir", cache_dir]).await;
        host.add("sample_rs1", "sample_rs").await;
        run_ok(&host, "sample_rs1", &input("cached", 100, 0)).await;
        assert_eq!(status_of(&host, "sample_rs1").await["origin"], expected);
        host.host.stop(Duration::from_secs(10)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_files_share_one_compilation_only_when_asked() {
    for (flags, compilations, second) in [
        (&[][..], 2, "compiled"),
        (&["--share-identical"][..], 1, "shared"),
    ] {
        let host = TestHost::start(flags).await;
        host.add("sample_rs1", "sample_rs").await;
        host.add("sample_rs2", "sample_rs").await;
        run_ok(&host, "sample_rs1", &input("one", 0, 0)).await;
        run_ok(&host, "sample_rs2", &input("two", 0, 0)).await;
        assert_eq!(
            host.metrics().await["compilations"],
            compilations,
            "{flags:?}"
        );
        assert_eq!(
            status_of(&host, "sample_rs2").await["origin"],
            second,
            "{flags:?}"
        );
    }
}

/// Sleeping guests must not hold OS threads: 1,000 requests sleeping 9 s each are all in
/// flight at the same moment on a 2-core machine.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_sleeping_requests_run_at_once() {
    const REQUESTS: usize = 1000;
    let host = TestHost::start(&[]).await;
    host.add("sample_rs1", "sample_rs").await;
    run_ok(&host, "sample_rs1", &input("warm", 0, 0)).await;

    let requests: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let client = host.client().clone();
            tokio::spawn(async move {
                client
                    .execute("sample_rs1", &input(&format!("sleeper {i}"), 42, 9000))
                    .await
            })
        })
        .collect();
    let mut most_live = 0;
    while most_live < REQUESTS as u64 && !requests.iter().all(|r| r.is_finished()) {
        most_live = most_live.max(host.metrics().await["instances_live"].as_u64().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ok = 0;
    for request in requests {
        let reply = request.await.unwrap().unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        ok += 1;
    }
    assert_eq!(ok, REQUESTS);
    assert_eq!(most_live, REQUESTS as u64, "all sleepers were live at once");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_in_flight_requests_and_exits_0() {
    const REQUESTS: u64 = 20;
    let host = TestHost::start(&["--drain-timeout-ms", "10000"]).await;
    host.add("sample_rs1", "sample_rs").await;
    run_ok(&host, "sample_rs1", &input("warm", 0, 0)).await;

    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let client = host.client().clone();
            tokio::spawn(async move {
                client
                    .execute("sample_rs1", &input("drain", 100, 1500))
                    .await
            })
        })
        .collect();
    while host.metrics().await["requests_in_flight"] != REQUESTS {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped = host.host.stop(Duration::from_secs(20)).await.unwrap();
    for request in requests {
        let reply = request.await.unwrap().unwrap();
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "in-flight request was cut: {}",
            reply.text()
        );
    }
    assert_eq!(
        stopped.status.and_then(|s| s.code()),
        Some(0),
        "{stopped:?}"
    );
    assert!(!stopped.killed);
    assert!(
        stopped.took < Duration::from_secs(10),
        "within the drain timeout: {stopped:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_times_out_exits_1() {
    let host = TestHost::start(&["--drain-timeout-ms", "300"]).await;
    host.add("sample_rs1", "sample_rs").await;
    run_ok(&host, "sample_rs1", &input("warm", 0, 0)).await;
    let client = host.client().clone();
    let sleeper = tokio::spawn(async move {
        client
            .execute("sample_rs1", &input("long", 0, 30_000))
            .await
    });
    while host.metrics().await["requests_in_flight"] != 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped = host.host.stop(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        stopped.status.and_then(|s| s.code()),
        Some(1),
        "{stopped:?}"
    );
    assert!(!stopped.killed);
    assert!(
        sleeper.await.unwrap().is_err(),
        "the cut request sees its connection close"
    );
}

/// `--api pharia-2024`: the Pharia Kernel's dialect of October 2024, as its profile describes
/// it, checked here route by route against a client that speaks it and one that does not,
/// with the samples built for its world, `pharia:skill@0.2`.
#[tokio::test(flavor = "multi_thread")]
async fn the_pharia_2024_dialect_namespaces_requires_a_bearer_and_does_not_sort() {
    let host = TestHost::start_in("pharia-kernel-2024", &["--api", "pharia-2024"]).await;
    assert_eq!(host.world, skillprof::record::profile::SkillWorld::Pharia);
    for name in ["sample_rs1", "sample_rs2", "sample_rs3", "hello"] {
        host.add(
            name,
            if name == "hello" {
                "hello"
            } else {
                "sample_rs"
            },
        )
        .await;
    }
    let client = host.client();
    // Its client qualifies names and sorts what the host lists in no order.
    assert_eq!(
        client.skills().await.unwrap(),
        ["hello", "sample_rs1", "sample_rs2", "sample_rs3"]
    );
    let listed: Vec<String> = client.get_json("/skills").await.unwrap();
    assert!(listed.iter().all(|n| n.starts_with("dev/")), "{listed:?}");
    let answer = run_ok(&host, "sample_rs1", &input("Alice", 100, 0)).await;
    assert!(answer["greeting"].as_str().unwrap().contains("Alice"));

    // Invalid input is a 500, with a JSON string for a body.
    let invalid = client
        .execute("sample_rs1", &json!({"memory": -1}))
        .await
        .unwrap();
    assert_eq!(invalid.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        invalid.json::<Value>().unwrap().is_string(),
        "{}",
        invalid.text()
    );

    // skillhost's own dialect: no bearer, a bare name. Refused, 400.
    let plain = skillprof::producers::hostctl::Client::new(
        client.base(),
        skillprof::record::profile::HostProfile::skillhost().dialect,
    );
    let no_bearer = plain.execute("dev/sample_rs1", &json!({})).await.unwrap();
    assert_eq!(no_bearer.status, StatusCode::BAD_REQUEST);
    assert!(
        no_bearer.error_message().contains("Bearer"),
        "{}",
        no_bearer.text()
    );
    let bare = client.send(
        Method::POST,
        "/execute_skill",
        Some(br#"{"skill": "sample_rs1"}"#.to_vec()),
    );
    let bare = bare.await.unwrap();
    assert_eq!(bare.status, StatusCode::BAD_REQUEST, "{}", bare.text());

    // Drop: dev%2Fsample_rs1, 200 with a message whether or not it was compiled.
    for expected in ["was removed from cache", "was not in cache"] {
        let dropped = client.drop_cached("sample_rs1").await.unwrap();
        assert_eq!(dropped.status, StatusCode::OK);
        assert!(
            dropped.error_message().contains(expected),
            "{}",
            dropped.text()
        );
    }
    assert_eq!(client.cached_skills().await.unwrap(), Vec::<String>::new());

    // The Python sample too: componentize-py's bindings of the same world, and an import of
    // the csi interface that skillhost links to functions that fail.
    host.add("sample_py1", "sample_py").await;
    let answer = run_ok(&host, "sample_py1", &input("Bob", 300, 0)).await;
    assert_eq!(answer["greeting"], "Hello Bob, from sample_py");

    // A component of another world is refused when executed, as the 2024 host refused it.
    another_world_is_refused(&host, StatusCode::INTERNAL_SERVER_ERROR).await;
}

/// A `skillprof:skill` component registered on a host that runs `pharia:skill`: executing it
/// answers `status` and says why, and the host still serves.
async fn another_world_is_refused(host: &TestHost, status: StatusCode) {
    host.skills
        .add("theirs", &common::skill_of(SkillWorld::Skillprof, "hello"))
        .unwrap();
    host.client()
        .wait_until_listed(&["theirs".to_owned()], Duration::from_secs(10))
        .await
        .unwrap();
    let refused = run_failing(host, "theirs", &json!({}), status).await;
    assert!(refused.contains("isn't using Pharia Skill"), "{refused}");
    assert_healthy(host).await;
}

/// `--api pharia-2025`: the Pharia Engine's dialect of November 2025 (0.15), as its profile
/// describes it, route by route: the skill in the path, the input as the body and the output
/// as the answer, the registered skills sorted and the compiled ones not, plain-text errors
/// with the engine's statuses, the two-segment drop route, and the 2024 routes gone.
#[tokio::test(flavor = "multi_thread")]
async fn the_pharia_2025_dialect_runs_skills_by_path_and_answers_with_the_engines_statuses() {
    let host = TestHost::start_in("pharia-engine-2025", &["--api", "pharia-2025"]).await;
    assert_eq!(host.world, SkillWorld::Pharia);
    for (name, sample) in [
        ("sample_rs2", "sample_rs"),
        ("sample_rs1", "sample_rs"),
        ("hello", "hello"),
        ("trap", "trap"),
    ] {
        host.add(name, sample).await;
    }
    let client = host.client();
    assert!(client.healthy().await);
    assert_eq!(
        client.skills().await.unwrap(),
        ["hello", "sample_rs1", "sample_rs2", "trap"]
    );
    // The engine sorts its registered skills.
    let listed: Vec<String> = client.get_json("/v1/skills").await.unwrap();
    assert_eq!(
        listed,
        ["dev/hello", "dev/sample_rs1", "dev/sample_rs2", "dev/trap"]
    );

    // The input is the body; the answer is the skill's output itself.
    let answer = run_ok(&host, "sample_rs1", &input("Alice", 100, 0)).await;
    assert!(answer["greeting"].as_str().unwrap().contains("Alice"));
    let raw = client
        .send(
            Method::POST,
            "/v1/skills/dev/hello/run",
            Some(br#"{"topic": "by path"}"#.to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(raw.json::<Value>().unwrap()["greeting"], "Hello, by path!");

    // Errors are plain text, with the engine's statuses.
    let plain = |reply: &skillprof::producers::hostctl::Reply| {
        assert!(
            reply.json::<Value>().is_err(),
            "not plain text: {}",
            reply.text()
        );
        reply.text()
    };
    for (skill, input, status, says) in [
        (
            "trap",
            json!({"mode": "invalid"}),
            StatusCode::BAD_REQUEST,
            "rejected its input",
        ),
        (
            "trap",
            json!({"mode": "error"}),
            StatusCode::BAD_REQUEST,
            "internal error",
        ),
        (
            "trap",
            json!({}),
            StatusCode::SERVICE_UNAVAILABLE,
            "unreachable",
        ),
        (
            "nobody",
            json!({}),
            StatusCode::BAD_REQUEST,
            "unknown skill",
        ),
    ] {
        let reply = client.execute(skill, &input).await.unwrap();
        assert_eq!(reply.status, status, "{skill} {input}: {}", reply.text());
        assert!(plain(&reply).contains(says), "{}", reply.text());
    }
    // Another namespace, and a body that is not JSON: 400 both.
    for (path, body) in [
        ("/v1/skills/prod/hello/run", &b"{}"[..]),
        ("/v1/skills/dev/hello/run", &b"{"[..]),
    ] {
        let reply = client
            .send(Method::POST, path, Some(body.to_vec()))
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
    }
    let http = skillprof::producers::hostctl::client::Http::new(client.base());
    let no_type = http
        .send(
            Method::POST,
            "/v1/skills/dev/hello/run",
            [],
            Some(("text/plain", b"{}".to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(no_type.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // Drop: two path segments, 200 with a message whether or not it was compiled.
    for expected in ["Skill removed from cache", "Skill was not present in cache"] {
        let dropped = client.drop_cached("sample_rs1").await.unwrap();
        assert_eq!(dropped.status, StatusCode::OK);
        assert_eq!(dropped.json::<Value>().unwrap(), expected);
    }
    assert!(
        !client
            .cached_skills()
            .await
            .unwrap()
            .contains(&"sample_rs1".to_owned())
    );
    let one_segment = client
        .send(Method::DELETE, "/cached_skills/dev%2Fhello", None)
        .await
        .unwrap();
    assert_eq!(one_segment.status, StatusCode::NOT_FOUND);

    // The 2024 routes are gone.
    for (method, path) in [
        (Method::POST, "/execute_skill"),
        (Method::GET, "/skills"),
        (Method::GET, "/healthcheck"),
    ] {
        let gone = client.send(method, path, None).await.unwrap();
        assert_eq!(gone.status, StatusCode::NOT_FOUND, "{path}");
    }

    // A component of another world does not load: 503, as the engine answers.
    another_world_is_refused(&host, StatusCode::SERVICE_UNAVAILABLE).await;
}
