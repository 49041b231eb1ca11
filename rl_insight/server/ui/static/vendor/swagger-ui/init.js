// Starts Swagger UI on /docs from the vendored bundle (a file, not an inline script: the CSP allows 'self' only).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout", syntaxHighlight: false });
});
