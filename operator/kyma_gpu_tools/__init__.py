"""The module's release tooling: the `kyma-gpu` CLI and every generator.

    cli             `kyma-gpu`: plan offline, print the CRD and the policies, chart facts,
                    the images a mirror needs, rule schemas; `run` starts the manager
    crd, reference  the Gpu CRD and docs/crd-reference.md, from the API models
    image_policy, manager_policy, flux_policy
                    the ValidatingAdmissionPolicies of config/admission/
    chart_facts     values-rules/charts/<version>.yaml from a packaged chart
    rules_schema    values-rules/schema/ and values-rules/context.md
    inventory       the images of a release or a plan; registry: ask a registry for them
    spec_errors     the CLI's words for a Gpu manifest with unknown fields

It stands on the runtime package kyma_gpu and the runtime never imports it (an import-linter
contract in pyproject.toml): the manager's image carries kyma_gpu alone.
"""
