"""The privacy pack in the admin (docs/privacy.md): `/admin/licensing/institution/<id>/privacy/`,
the report as a page, and its Markdown and PDF downloads (`?format=markdown|pdf`). For the
institution's admins and superusers; another institution's id is a 404 (the admin's own
scoping), a reviewer, teacher or safeguarding contact is refused (403). Registered on the
institution's admin page (console's InstitutionAdmin, extended here: the console sits below this
wing and cannot link up to it), with a link on its change page."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from ..access.scoping import ADMIN, scope_of
from ..console.admin.licenses import InstitutionAdmin
from ..models import Institution
from .document import document
from .markdown import to_markdown
from .pdf import to_pdf
from .report import privacy_report


class PrivacyInstitutionAdmin(InstitutionAdmin):
    change_form_template = "admin/licensing/institution/change_form.html"

    def get_urls(self):
        view = self.admin_site.admin_view(self.privacy_view)
        return [
            path("<path:object_id>/privacy/", view, name="licensing_institution_privacy"),
            *super().get_urls(),
        ]

    def may_read_privacy(self, request) -> bool:
        """Superusers and the institution's admins (the page names every role's head count
        and sub-processor: reviewers, teachers and contacts read no such thing)."""
        scope = scope_of(request.user)
        return scope.superuser or scope.role == ADMIN

    def change_view(self, request, object_id, form_url="", extra_context=None):
        context = dict(extra_context or {})
        if self.may_read_privacy(request):
            context["privacy_url"] = reverse(
                "admin:licensing_institution_privacy", args=[object_id]
            )
        return super().change_view(request, object_id, form_url, context)

    def privacy_view(self, request, object_id):
        institution = self.get_object(request, object_id)  # another institution's: None
        if institution is None or not self.has_view_permission(request, institution):
            raise Http404("No institution with this id")
        if not self.may_read_privacy(request):
            raise PermissionDenied
        doc = document(privacy_report(institution))
        wanted = request.GET.get("format", "")
        if wanted in ("markdown", "pdf"):
            return _download(doc, wanted, institution)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "object": institution,
            "title": doc.title,
            "doc": doc,
            "markdown_url": "?format=markdown",
            "pdf_url": "?format=pdf",
        }
        return TemplateResponse(request, "admin/licensing/institution/privacy.html", context)


def _download(doc, wanted: str, institution: Institution) -> HttpResponse:
    """The file, named after the institution's id (a name may hold anything), never cached."""
    if wanted == "pdf":
        response = HttpResponse(to_pdf(doc), content_type="application/pdf")
        name = f"privacy-pack-{institution.pk}.pdf"
    else:
        response = HttpResponse(to_markdown(doc), content_type="text/markdown; charset=utf-8")
        name = f"privacy-pack-{institution.pk}.md"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


admin.site.unregister(Institution)
admin.site.register(Institution, PrivacyInstitutionAdmin)
