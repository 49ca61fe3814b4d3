//! `/v1/projects` and `/v1/projects/<slug>/members` (CONTRACT: Users and sessions).

use std::sync::Arc;

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::pagination::{Limit, PageQuery, Paginated, Skip};
use super::security::{need, Authorized, SignedIn};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::{random_token, time::iso, time::now_ms, ApiKeyHash, Email, ProjectSlug, Role};
use crate::store::accounts::{MemberRow, ProjectRow};
use crate::store::is_unique_violation;

#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Project {
    #[oai(rename = "_id")]
    pub id: String,
    pub slug: String,
    pub name: String,
    pub created_at: String,
    /// The caller's role, when the caller is a signed-in user.
    pub role: Option<Role>,
}

impl Project {
    fn new(p: ProjectRow, role: Option<Role>) -> Self {
        Project { id: p.id, slug: p.slug, name: p.name, created_at: iso(p.created_at), role }
    }
}

/// Body of `POST /v1/projects`.
#[derive(Debug, Object)]
pub struct CreateProject {
    /// 3–40 characters: lowercase letters, digits, inner dashes. Unique (409).
    pub slug: String,
    /// Display name, 1–100 characters (default: the slug).
    pub name: Option<String>,
}

impl FromJsonBody for CreateProject {
    fn from_fields(f: &mut Fields) -> Self {
        let slug = f.parsed("slug", |s| ProjectSlug::parse(s).map(|s| s.as_str().to_string()));
        f.document("slug", |r| (r.len, r.pattern) = (Some((3, 40)), Some(ProjectSlug::PATTERN)));
        CreateProject { slug: slug.unwrap_or_default(), name: f.opt_string("name", 1..=100) }
    }
}

#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Member {
    #[oai(rename = "_id")]
    pub user_id: String,
    pub email: String,
    pub role: Role,
    pub created_at: String,
}

impl From<MemberRow> for Member {
    fn from(m: MemberRow) -> Self {
        Member {
            user_id: m.user_id,
            email: m.email,
            role: Role::parse_db(&m.role).unwrap_or(Role::Viewer),
            created_at: iso(m.created_at),
        }
    }
}

/// A new member; `invitation` is set only when the person has no password yet.
#[derive(Debug, Object)]
pub struct AddedMember {
    #[oai(flatten)]
    pub member: Member,
    /// For a person without an account (or who has not set a password yet): the invitation to
    /// hand them, shown in this response only. They redeem it at `POST /v1/auth/accept-invitation`.
    pub invitation: Option<Invitation>,
}

/// A single-use invitation to set one's password, valid 7 days.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Invitation {
    pub token: String,
    pub expires_at: String,
}

/// How long an invitation can be redeemed (CONTRACT: Users and sessions).
pub const INVITATION_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Body of `POST /members`.
#[derive(Debug, Object)]
pub struct AddMember {
    pub email: String,
    pub role: Role,
}

impl FromJsonBody for AddMember {
    fn from_fields(f: &mut Fields) -> Self {
        let email = f.parsed("email", |s| Email::parse(s).map(|e| e.as_str().to_string()));
        f.document("email", |r| (r.len, r.pattern) = (Some((3, 254)), Some(Email::PATTERN)));
        let role = f.parsed("role", parse_role);
        AddMember { email: email.unwrap_or_default(), role: role.unwrap_or(Role::Viewer) }
    }
}

/// Body of `PATCH /members/<userId>`.
#[derive(Debug, Object)]
pub struct UpdateMember {
    pub role: Role,
}

impl FromJsonBody for UpdateMember {
    fn from_fields(f: &mut Fields) -> Self {
        UpdateMember { role: f.parsed("role", parse_role).unwrap_or(Role::Viewer) }
    }
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse_db(s).ok_or_else(|| "must be one of viewer, member, admin".to_string())
}

#[derive(ApiResponse)]
pub enum CreateProjectResponse {
    /// The project was created; the caller is its admin.
    #[oai(status = 201)]
    Created(Json<Project>),
}

#[derive(ApiResponse)]
pub enum AddMemberResponse {
    /// The user is now a member.
    #[oai(status = 201)]
    Created(Json<AddedMember>),
}

pub struct ProjectsApi;

#[OpenApi(tag = "ApiTags::Projects")]
impl ProjectsApi {
    /// Create a project; the signed-in user becomes its admin
    #[oai(path = "/v1/projects", method = "post", operation_id = "createProject")]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        signed_in: SignedIn,
        body: JsonBody<CreateProject>,
    ) -> ApiResult<CreateProjectResponse> {
        let user = signed_in.user;
        let body = body.0;
        let name = body.name.unwrap_or_else(|| body.slug.clone());
        match app.db.create_project(&body.slug, &name, &user.id).await {
            Ok(p) => Ok(CreateProjectResponse::Created(Json(Project::new(p, Some(Role::Admin))))),
            Err(e) if is_unique_violation(&e) => Err(ApiError::conflict("slug is taken")),
            Err(e) => Err(e.into()),
        }
    }

    /// List the signed-in user's projects, newest first
    #[oai(path = "/v1/projects", method = "get", operation_id = "listProjects")]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        signed_in: SignedIn,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
    ) -> ApiResult<Json<Paginated<Project>>> {
        let user = signed_in.user;
        let page = PageQuery::list(skip.0, limit.0)?;
        let rows = app.db.projects_of_user(&user.id, page.skip, page.limit).await?;
        let items = rows
            .items
            .into_iter()
            .map(|r| {
                let role = Role::parse_db(&r.role);
                Project::new(
                    ProjectRow { id: r.id, slug: r.slug, name: r.name, created_at: r.created_at },
                    role,
                )
            })
            .collect();
        Ok(Json(Paginated::new(items, rows.total, page)))
    }

    /// Get a project
    #[oai(path = "/v1/projects/:slug", method = "get", operation_id = "getProject")]
    async fn get(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Member>,
        #[oai(name = "slug")] _slug: Path<String>,
    ) -> ApiResult<Json<Project>> {
        let row = app
            .db
            .project_by_slug(&p.project.slug)
            .await?
            .ok_or_else(|| ApiError::not_found("project not found"))?;
        Ok(Json(Project::new(row, ProjectsApi::role_of(&app, &p).await?)))
    }

    /// List the project's members (admin only)
    #[oai(path = "/v1/projects/:slug/members", method = "get", operation_id = "listMembers")]
    async fn members(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Admin>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
    ) -> ApiResult<Json<Paginated<Member>>> {
        let page = PageQuery::list(skip.0, limit.0)?;
        let rows = app.db.list_members(&p.project.id, page.skip, page.limit).await?;
        Ok(Json(Paginated::from_rows(rows, page)))
    }

    /// Add a member by e-mail, creating the account if there is none (admin only)
    #[oai(path = "/v1/projects/:slug/members", method = "post", operation_id = "addMember")]
    async fn add_member(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Admin>,
        #[oai(name = "slug")] _slug: Path<String>,
        body: JsonBody<AddMember>,
    ) -> ApiResult<AddMemberResponse> {
        let body = body.0;
        let token = random_token(43);
        let token_hash = ApiKeyHash::of(&token).0;
        let expires_at = now_ms() + INVITATION_TTL.as_millis() as i64;
        let project_id = p.project.id.clone();
        // No account: one is created without a password, with its invitation. Nobody but the
        // person who redeems the invitation ever knows the password.
        let (user, invited) = match app.db.user_by_email(&body.email).await? {
            Some(user) => (user, false),
            None => match app
                .db
                .add_invited_member(&body.email, &project_id, body.role, &token_hash, expires_at)
                .await
            {
                Ok(user) => (user, true),
                // Created concurrently by another request: add that account as it is.
                Err(e) if is_unique_violation(&e) => (
                    app.db
                        .user_by_email(&body.email)
                        .await?
                        .ok_or_else(|| ApiError::conflict("user is a member already"))?,
                    false,
                ),
                Err(e) => return Err(e.into()),
            },
        };
        if !invited {
            match app.db.add_member(&project_id, &user.id, body.role).await {
                Ok(()) => {}
                Err(e) if is_unique_violation(&e) => {
                    return Err(ApiError::conflict("user is a member already"))
                }
                Err(e) => return Err(e.into()),
            }
        }
        // An account that has never set its password (an earlier invitation not redeemed yet)
        // gets a fresh invitation too; an account with a password gets none.
        let invitation = if invited || user.password_hash.is_empty() {
            if !invited {
                app.db.create_invitation(&token_hash, &user.id, &project_id, expires_at).await?;
            }
            Some(Invitation { token, expires_at: iso(expires_at) })
        } else {
            None
        };
        let member = app
            .db
            .member(&project_id, &user.id)
            .await?
            .ok_or_else(|| ApiError::internal("member vanished"))?;
        tracing::info!(project = %p.project.slug, user_id = %user.id, invited = invitation.is_some(), "member added");
        Ok(AddMemberResponse::Created(Json(AddedMember { member: member.into(), invitation })))
    }

    /// Change a member's role (admin only); the last admin cannot be demoted
    #[oai(path = "/v1/projects/:slug/members/:user_id", method = "patch", operation_id = "updateMember")]
    async fn update_member(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Admin>,
        #[oai(name = "slug")] _slug: Path<String>,
        user_id: Path<String>,
        body: JsonBody<UpdateMember>,
    ) -> ApiResult<Json<Member>> {
        app.db
            .member(&p.project.id, &user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("member not found"))?;
        if !app.db.set_role(&p.project.id, &user_id, body.0.role).await? {
            return Err(ApiError::conflict("a project keeps at least one admin"));
        }
        let member = app
            .db
            .member(&p.project.id, &user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("member not found"))?;
        Ok(Json(member.into()))
    }

    /// Remove a member (admin only); the last admin cannot be removed
    #[oai(path = "/v1/projects/:slug/members/:user_id", method = "delete", operation_id = "removeMember")]
    async fn remove_member(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Admin>,
        #[oai(name = "slug")] _slug: Path<String>,
        user_id: Path<String>,
    ) -> ApiResult<Json<Member>> {
        let member = app
            .db
            .member(&p.project.id, &user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("member not found"))?;
        if !app.db.remove_member(&p.project.id, &user_id).await? {
            return Err(ApiError::conflict("a project keeps at least one admin"));
        }
        Ok(Json(member.into()))
    }
}

impl ProjectsApi {
    async fn role_of(app: &ApiState, p: &super::security::Principal) -> ApiResult<Option<Role>> {
        match &p.actor {
            super::security::Actor::User { id } => Ok(app.db.role_in(&p.project.id, id).await?),
            super::security::Actor::Key { .. } => Ok(None),
        }
    }
}
