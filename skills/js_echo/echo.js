// A JavaScript wasi:http/proxy handler, componentized with componentize-js (StarlingMonkey,
// SpiderMonkey built for WASI, inside): the third kind of component skillprof's answers are
// checked on, beside the Rust and Python ones. scripts/build-public-skills.sh builds it as
// build/public/js_http_echo.wasm. POST /echo parses its JSON body and answers it with a
// greeting; any other request is a 400.
addEventListener("fetch", (event) => event.respondWith(answer(event.request)));

async function answer(request) {
  const path = new URL(request.url).pathname;
  if (request.method !== "POST" || path !== "/echo") {
    return new Response(`${request.method} ${path}: only POST /echo is served\n`, {
      status: 400,
    });
  }
  let input;
  try {
    input = JSON.parse(await request.text());
  } catch (error) {
    return new Response(`the body is not JSON: ${error.message}\n`, { status: 400 });
  }
  const topic = typeof input?.topic === "string" ? input.topic : "world";
  return new Response(JSON.stringify({ greeting: `Hello ${topic}, from JavaScript`, input }), {
    headers: { "content-type": "application/json" },
  });
}
