"""What setup.cfg cannot say: the repository's top-level conversation_templates/ folder is installed
as the subpackage api_like_oai.conversation_templates, so the wheel puts nothing into site-packages
but api_like_oai (a top-level package of that generic name could collide with another's).
The rest of the metadata is in setup.cfg."""

from setuptools import find_packages, setup

TEMPLATES = "api_like_oai.conversation_templates"

setup(
    packages=[*find_packages(include=["api_like_oai", "api_like_oai.*"]), TEMPLATES],
    package_dir={TEMPLATES: "conversation_templates"},
    package_data={
        TEMPLATES: ["*.jinja", "*.yaml"],
        # the dashboard's page (/ui) and the chart library it ships (ui/vendor/uplot, with its licence)
        "api_like_oai": ["ui/*.html", "ui/*.js", "ui/*.css", "ui/vendor/uplot/*"],
    },
)
